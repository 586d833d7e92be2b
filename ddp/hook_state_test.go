package ddp

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// stateShapes are two buckets' parameters: bucket 0 a matrix PowerSGD
// compresses and a bias, bucket 1 a 3-D tensor and a small matrix it
// does not.
var stateShapes = [2][][]int{{{12, 10}, {12}}, {{6, 4, 5}, {2, 3}}}

// runHookSteps runs steps [from, to) of h on rank g.Rank()'s gradients
// (randGrads) and returns the buckets' outputs at the last step.
func runHookSteps(g *allreduce.Group, h CommHook[float64], from, to int) ([][]float64, error) {
	out := make([][]float64, len(stateShapes))
	for s := from; s < to; s++ {
		for i, shapes := range stateShapes {
			buf := randGrads(g.Rank(), 100*s+i, elems(shapes))
			b, err := NewGradBucket(g, i, i == len(stateShapes)-1, buf, shapes)
			if err != nil {
				return nil, err
			}
			if err := h.Reduce(context.Background(), b); err != nil {
				return nil, err
			}
			out[i] = buf
		}
	}
	return out, nil
}

// A hook's state saved after 3 steps and loaded into a fresh hook gives
// bitwise the outputs of the hook that never stopped, for 16-bit
// compression with error feedback, auto compression (its decisions kept:
// the resumed hook does not decide again) and PowerSGD (warm start, error
// feedback, random Qs drawn at step 2 after the plain all-reduces).
func TestHookStateResumesBitwise(t *testing.T) {
	hooks := map[string]func() (StatefulHook[float64], error){
		"fp16": func() (StatefulHook[float64], error) { return NewCompression[float64](FP16, true) },
		"bf16": func() (StatefulHook[float64], error) { return NewCompression[float64](BF16, true) },
		"powersgd": func() (StatefulHook[float64], error) {
			return NewPowerSGD[float64](PowerSGDConfig{Rank: 2, StartIter: 2, MinCompressionRate: 2, ErrorFeedback: true, WarmStart: true, Seed: 7})
		},
		"auto": func() (StatefulHook[float64], error) {
			slow := cost.DefaultModelFor(cost.FlatShape(3))
			slow.Intra = cost.Link{Alpha: 50e-6, Beta: 8e-6} // 1 Mbit/s: compression pays
			slow.Inter = slow.Intra
			return NewAutoCompression[float64](BF16, &slow, nil)
		},
		"powersgd-cold": func() (StatefulHook[float64], error) {
			return NewPowerSGD[float64](PowerSGDConfig{Rank: 1, MinCompressionRate: 1, ErrorFeedback: true, Seed: 3})
		},
	}
	for name, newHook := range hooks {
		t.Run(name, func(t *testing.T) {
			errs := allreducetest.RunInproc(3, 20*time.Second, func(g *allreduce.Group) error {
				whole, err := newHook()
				if err != nil {
					return err
				}
				want, err := runHookSteps(g, whole, 0, 6)
				if err != nil {
					return err
				}
				first, err := newHook()
				if err != nil {
					return err
				}
				if _, err := runHookSteps(g, first, 0, 3); err != nil {
					return err
				}
				st, err := first.HookState()
				if err != nil {
					return err
				}
				second, err := newHook()
				if err != nil {
					return err
				}
				if err := second.LoadHookState(st, st.Local); err != nil {
					return err
				}
				if a, ok := second.(*AutoCompression[float64]); ok {
					if c, decided := a.Compresses(1); !c || !decided {
						return fmt.Errorf("auto: bucket 1 after loading: compress %v, decided %v", c, decided)
					}
				}
				got, err := runHookSteps(g, second, 3, 6)
				if err != nil {
					return err
				}
				for i := range want {
					for j := range want[i] {
						if math.Float64bits(want[i][j]) != math.Float64bits(got[i][j]) {
							return fmt.Errorf("rank %d bucket %d element %d: %v resumed, %v uninterrupted", g.Rank(), i, j, got[i][j], want[i][j])
						}
					}
				}
				// Without the residuals (another world size) the hook runs on,
				// its residuals zero.
				third, err := newHook()
				if err != nil {
					return err
				}
				if err := third.LoadHookState(st, nil); err != nil {
					return err
				}
				again, err := third.HookState()
				if err != nil {
					return err
				}
				for _, e := range again.Local {
					if e != 0 {
						return fmt.Errorf("rank %d: residual %v after loading without them", g.Rank(), e)
					}
				}
				_, err = runHookSteps(g, third, 3, 4)
				return err
			})
			for _, err := range errs {
				require.NoError(t, err)
			}
		})
	}
}

// A state loads only into a hook of its kind and configuration, and a
// truncated or padded one is refused with what does not fit.
func TestHookStateMismatch(t *testing.T) {
	errs := allreducetest.RunInproc(1, 20*time.Second, func(g *allreduce.Group) error {
		bf, _ := NewCompression[float64](BF16, true)
		if _, err := runHookSteps(g, bf, 0, 1); err != nil {
			return err
		}
		st, err := bf.HookState()
		if err != nil {
			return err
		}
		fp, _ := NewCompression[float64](FP16, true)
		require.ErrorContains(t, fp.LoadHookState(st, st.Local), "bf16 compression")
		ps, _ := NewPowerSGD[float64](DefaultPowerSGDConfig())
		require.ErrorContains(t, ps.LoadHookState(st, st.Local), `kind "compression/1"`)
		require.ErrorContains(t, bf.LoadHookState(st, st.Local[1:]), "residuals for bucket")
		require.ErrorContains(t, bf.LoadHookState(st, append(st.Local, 1)), "beyond the buckets")

		cfg := PowerSGDConfig{Rank: 2, MinCompressionRate: 2, ErrorFeedback: true, WarmStart: true}
		p1, _ := NewPowerSGD[float64](cfg)
		if _, err := runHookSteps(g, p1, 0, 2); err != nil {
			return err
		}
		pst, err := p1.HookState()
		if err != nil {
			return err
		}
		cfg.Rank = 3
		p3, _ := NewPowerSGD[float64](cfg)
		require.ErrorContains(t, p3.LoadHookState(pst, pst.Local), "PowerSGD state saved under")
		bad := pst
		bad.Shared = bad.Shared[1:]
		require.ErrorContains(t, p1.LoadHookState(bad, pst.Local), "Q values")
		bad.Meta = []byte("{")
		require.ErrorContains(t, p1.LoadHookState(bad, pst.Local), "PowerSGD state")
		return nil
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
}
