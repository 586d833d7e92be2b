package ddp

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// redistHooks are the hooks whose residuals a resume on another world
// size redistributes; sumOfInputs says how the residual enters the
// averaged input (true: Σ_r (g_r/N + e_r), Compression's; false:
// Σ_r (g_r + e_r)/N, PowerSGD's).
var redistHooks = map[string]struct {
	make         func(n int) (StatefulHook[float32], error)
	sumOfInputs  bool
	outputsMatch bool // the next step's output depends on the inputs' sum alone
}{
	"fp16": {func(int) (StatefulHook[float32], error) { return NewCompression[float32](FP16, true) }, true, false},
	"bf16": {func(int) (StatefulHook[float32], error) { return NewCompression[float32](BF16, true) }, true, false},
	"auto": {func(n int) (StatefulHook[float32], error) {
		slow := cost.DefaultModelFor(cost.FlatShape(n))
		slow.Intra = cost.Link{Alpha: 50e-6, Beta: 8e-6} // 1 Mbit/s: compression pays
		slow.Inter = slow.Intra
		return NewAutoCompression[float32](BF16, &slow, nil)
	}, true, false},
	"powersgd": {func(int) (StatefulHook[float32], error) {
		return NewPowerSGD[float32](PowerSGDConfig{Rank: 2, StartIter: 1, MinCompressionRate: 1, ErrorFeedback: true, WarmStart: true, Seed: 5})
	}, false, true},
}

// grads32 is rank r's gradient of bucket i at step s, in float32.
func grads32(r, s, i int) []float32 {
	g := randGrads(r, 100*s+i, elems(stateShapes[i]))
	out := make([]float32, len(g))
	for k, v := range g {
		out[k] = float32(v)
	}
	return out
}

// runHook32 runs one step of h on bufs (one per bucket, reduced in place).
func runHook32(g *allreduce.Group, h CommHook[float32], bufs [][]float32) error {
	for i, shapes := range stateShapes {
		b, err := NewGradBucket(g, i, i == len(stateShapes)-1, bufs[i], shapes)
		if err != nil {
			return err
		}
		if err := h.Reduce(context.Background(), b); err != nil {
			return err
		}
	}
	return nil
}

// residuals returns h's error-feedback residual of bucket i (nil if none).
func residuals(h StatefulHook[float32], i int) []float32 {
	switch x := h.(type) {
	case *Compression[float32]:
		if st := x.buckets[i]; st != nil {
			return st.errs
		}
	case *AutoCompression[float32]:
		return residuals(x.inner, i)
	case *PowerSGD[float32]:
		if st := x.buckets[i]; st != nil {
			return st.errs
		}
	}
	return nil
}

// A run saved by N ranks and resumed on N' (4 → 3 and 2 → 4) has, at its
// next step, the averaged corrected input of the run that never stopped:
// Σ_r (g_r/N + e_r) for 16-bit compression and auto, Σ_r (g_r + e_r)/N for
// PowerSGD, with the next step's gradients of one mean on both world
// sizes (as the same global batch gives). The reference is computed here
// in float64 from the saved residuals and the gradients; the resumed side
// is what the hooks add (the loaded residual plus g/N' in float32, as
// their step does). Tolerance, per element: 8·ε32 times the sum of the
// absolute values of both sides' terms: each term is rounded to float32 at
// most four times (g', g'/N', + e', and e' itself), so the float32
// rounding is below 4·ε32 of it. Starting the residuals at zero, or
// scaling them by the wrong N, misses by the residuals' size (checked).
// PowerSGD's next output (a function of that sum and the shared Q alone)
// matches the uninterrupted one's within 1e-4 of its largest value (the
// orthogonalisation and products in float32), where the zero residuals
// miss by more than 10 times that; its Qs and auto's decisions load
// unchanged.
func TestResidualsRedistributedAcrossWorldSizes(t *testing.T) {
	for name, hk := range redistHooks {
		for _, sizes := range [][2]int{{4, 3}, {2, 4}} {
			t.Run(fmt.Sprintf("%s/%d-to-%d", name, sizes[0], sizes[1]), func(t *testing.T) {
				n, n2 := sizes[0], sizes[1]
				states, next, outs := saveAndStep(t, hk.make, n)
				locals := make([][]float32, n)
				for r := range locals {
					locals[r] = states[r].Local
				}
				mean := meanGrads(next)
				resumed, resumedOut, zeroOut := resumeOn(t, hk.make, n2, states[0], locals, mean)
				for i := range stateShapes {
					checkAveragedInput(t, hk.sumOfInputs, n, n2, next, states, resumed, mean, i)
				}
				if hk.outputsMatch {
					checkOutputs(t, outs, resumedOut, zeroOut)
				}
			})
		}
	}
}

// saveAndStep runs 3 steps of a hook on n ranks, saves every rank's state,
// and runs the next step: it returns the states, the next step's
// gradients and rank 0's outputs of it.
func saveAndStep(t *testing.T, newHook func(int) (StatefulHook[float32], error), n int) ([]HookState[float32], [][][]float32, [][]float32) {
	states := make([]HookState[float32], n)
	next := make([][][]float32, n)
	var outs [][]float32
	errs := allreducetest.RunInproc(n, 20*time.Second, func(g *allreduce.Group) error {
		r := g.Rank()
		h, err := newHook(n)
		if err != nil {
			return err
		}
		for s := 0; s < 3; s++ {
			bufs := [][]float32{grads32(r, s, 0), grads32(r, s, 1)}
			if err := runHook32(g, h, bufs); err != nil {
				return err
			}
		}
		if states[r], err = h.HookState(); err != nil {
			return err
		}
		next[r] = [][]float32{grads32(r, 3, 0), grads32(r, 3, 1)}
		bufs := [][]float32{append([]float32(nil), next[r][0]...), append([]float32(nil), next[r][1]...)}
		if err := runHook32(g, h, bufs); err != nil {
			return err
		}
		if r == 0 {
			outs = bufs
		}
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	require.NotEmpty(t, states[0].Local, "no residuals saved")
	return states, next, outs
}

// meanGrads is the next step's gradient averaged over the saving ranks,
// in float64.
func meanGrads(next [][][]float32) [][]float64 {
	mean := make([][]float64, len(stateShapes))
	for i := range mean {
		mean[i] = make([]float64, len(next[0][i]))
		for _, g := range next {
			for k, v := range g[i] {
				mean[i][k] += float64(v) / float64(len(next))
			}
		}
	}
	return mean
}

// resumedGrad is rank r of n's next-step gradient of bucket i on the
// resumed side: the saving ranks' mean plus a spread that sums to zero
// over the n ranks, in float32.
func resumedGrad(mean [][]float64, r, n, i int) []float32 {
	out := make([]float32, len(mean[i]))
	spread := make([][]float64, n)
	for q := range spread {
		spread[q] = randGrads(50+q, 7+i, len(out))
	}
	for k := range out {
		sum := 0.0
		for q := range spread {
			sum += spread[q][k]
		}
		out[k] = float32(mean[i][k] + spread[r][k] - sum/float64(n))
	}
	return out
}

// resumeOn loads the saved state into fresh hooks on n2 ranks, the
// residuals redistributed, and runs the next step on resumedGrad. It
// returns the hooks (their residuals as loaded, before the step, kept in
// a copy), rank 0's outputs, and rank 0's outputs of hooks loaded with
// zero residuals instead.
func resumeOn(t *testing.T, newHook func(int) (StatefulHook[float32], error), n2 int, st HookState[float32], locals [][]float32, mean [][]float64) ([][][]float32, [][]float32, [][]float32) {
	loaded := make([][][]float32, n2)
	var out, zeroOut [][]float32
	var mu sync.Mutex
	errs := allreducetest.RunInproc(n2, 20*time.Second, func(g *allreduce.Group) error {
		r := g.Rank()
		run := func(redistribute bool) ([][]float32, error) {
			h, err := newHook(n2)
			if err != nil {
				return nil, err
			}
			var local []float32
			if redistribute {
				if local, err = h.(RedistributingHook[float32]).RedistributeLocal(st, locals, n2); err != nil {
					return nil, err
				}
			}
			if err := h.LoadHookState(st, local); err != nil {
				return nil, err
			}
			if err := checkKept(h, st); err != nil {
				return nil, err
			}
			if redistribute {
				loaded[r] = [][]float32{append([]float32(nil), residuals(h, 0)...), append([]float32(nil), residuals(h, 1)...)}
			}
			bufs := [][]float32{resumedGrad(mean, r, n2, 0), resumedGrad(mean, r, n2, 1)}
			return bufs, runHook32(g, h, bufs)
		}
		got, err := run(true)
		if err != nil {
			return err
		}
		zero, err := run(false)
		if err != nil {
			return err
		}
		if r == 0 {
			mu.Lock()
			out, zeroOut = got, zero
			mu.Unlock()
		}
		return nil
	})
	require.NoError(t, allreducetest.FirstError(errs))
	return loaded, out, zeroOut
}

// checkKept: the loaded hook holds the saved Qs (Shared) bitwise, and an
// auto hook the saved decisions.
func checkKept(h StatefulHook[float32], st HookState[float32]) error {
	again, err := h.HookState()
	if err != nil {
		return err
	}
	if len(again.Shared) != len(st.Shared) {
		return fmt.Errorf("%d shared values loaded, %d saved", len(again.Shared), len(st.Shared))
	}
	for k := range st.Shared {
		if math.Float32bits(again.Shared[k]) != math.Float32bits(st.Shared[k]) {
			return fmt.Errorf("shared value %d: %v loaded, %v saved", k, again.Shared[k], st.Shared[k])
		}
	}
	if string(again.Meta) != string(st.Meta) {
		return fmt.Errorf("meta %s loaded, %s saved", again.Meta, st.Meta)
	}
	return nil
}

// checkAveragedInput compares bucket i's averaged corrected input on the
// resumed side with the reference (see the test's comment).
func checkAveragedInput(t *testing.T, sumOfInputs bool, n, n2 int, next [][][]float32, states []HookState[float32], loaded [][][]float32, mean [][]float64, i int) {
	if loaded[0][i] == nil {
		return // a bucket auto left uncompressed: no residual
	}
	off := 0
	if i == 1 && loaded[0][0] != nil {
		off = elems(stateShapes[0]) // Local holds bucket 0's residuals first
	}
	grads := make([][]float32, n2)
	for r := range grads {
		grads[r] = resumedGrad(mean, r, n2, i)
	}
	eps := float64(math.Nextafter32(1, 2) - 1)
	worst, worstZero := 0.0, 0.0
	for k := range loaded[0][i] {
		want, mag := 0.0, 0.0
		for r := 0; r < n; r++ {
			e := float64(states[r].Local[off+k])
			term := float64(next[r][i][k]) + e
			if sumOfInputs {
				term = float64(next[r][i][k])/float64(n) + e
			} else {
				term /= float64(n)
			}
			want += term
			mag += math.Abs(term)
		}
		got, zero := 0.0, 0.0
		for r := 0; r < n2; r++ {
			g := grads[r][k]
			e := loaded[r][i][k]
			var term, bare float32
			if sumOfInputs {
				term, bare = g/float32(n2)+e, g/float32(n2) // as Compression's round
			} else {
				term, bare = (g+e)/float32(n2), g/float32(n2) // PowerSGD's input, averaged
			}
			got += float64(term)
			zero += float64(bare)
			mag += math.Abs(float64(term))
		}
		tol := 8 * eps * mag
		if d := math.Abs(got - want); d > tol {
			t.Fatalf("bucket %d element %d: averaged corrected input %v resumed on %d ranks, %v on %d (tolerance %v)", i, k, got, n2, want, n, tol)
		}
		worst = max(worst, math.Abs(got-want)/tol)
		worstZero = max(worstZero, math.Abs(zero-want)/tol)
	}
	t.Logf("bucket %d: worst error %.3g of the tolerance; residuals at zero: %.3g", i, worst, worstZero)
	require.Greater(t, worstZero, 100.0, "bucket %d: zero residuals would pass too: the test cannot tell", i)
}

// checkOutputs: PowerSGD's next output resumed equals the uninterrupted
// one within 1e-4 of its largest value; with zero residuals it does not.
func checkOutputs(t *testing.T, want, got, zero [][]float32) {
	for i := range want {
		scale, worst, worstZero := 0.0, 0.0, 0.0
		for k := range want[i] {
			scale = max(scale, math.Abs(float64(want[i][k])))
		}
		for k := range want[i] {
			worst = max(worst, math.Abs(float64(got[i][k]-want[i][k])))
			worstZero = max(worstZero, math.Abs(float64(zero[i][k]-want[i][k])))
		}
		tol := 1e-4 * scale
		t.Logf("bucket %d output: worst error %.3g, zero residuals %.3g, tolerance %.3g", i, worst, worstZero, tol)
		require.LessOrEqual(t, worst, tol, "bucket %d: PowerSGD's output resumed", i)
		require.Greater(t, worstZero, 10*tol, "bucket %d: zero residuals would pass too", i)
	}
}
