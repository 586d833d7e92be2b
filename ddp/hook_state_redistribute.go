package ddp

import "fmt"

// Residuals across world sizes. A run resumed on another world size N'
// than the N ranks that saved a hook's state cannot give each rank "its"
// residual, but it need not: with error feedback, the step after the
// resume depends on the residuals only through their sum over the ranks.
// The input the collective averages is, per element:
//
//   - Compression (fp16, bf16, and auto's compressed buckets): rank r
//     sends y_r = g_r/N + e_r and the group sums the ys, so the averaged
//     input is mean(g) + Σ_r e_r. Each of N' ranks given e' = Σ_r e_r / N'
//     keeps it: N'·e' = Σ_r e_r.
//   - PowerSGD: rank r compresses M_r = g_r + e_r, and the result is a
//     function of Σ_r M_r / N = mean(g) + Σ_r e_r / N (the Ps and Qs are
//     sums over ranks; the uncompressed tensors are averaged; exactly so
//     with OrthogonalizationEpsilon 0, the default, as the P's scale then
//     does not matter). Each of N' ranks given e' = Σ_r e_r / N keeps it:
//     Σ_r' e'/N' = Σ_r e_r / N.
//
// So every new rank gets the same residual, the old ones' sum times a
// factor (1/N' or 1/N), summed in float64 and rounded to T once. The
// global batch, and so mean(g), is the same on any world size (the
// trainer's data order does not depend on it), and the resumed step's
// averaged input equals the uninterrupted one's up to float rounding.
// The shared state (PowerSGD's Qs) and the Meta (step count, generator,
// auto's decisions) do not depend on the world size and load as they are.

// RedistributingHook is a StatefulHook whose Local state can be carried
// onto another world size.
type RedistributingHook[T Float] interface {
	StatefulHook[T]
	// RedistributeLocal returns the Local state each rank of a group of
	// size ranks loads, from locals, the Local states of every rank of the
	// group that saved st (the built-in hooks give every rank the same).
	RedistributeLocal(st HookState[T], locals [][]T, size int) ([]T, error)
}

var (
	_ RedistributingHook[float32] = (*Compression[float32])(nil)
	_ RedistributingHook[float32] = (*AutoCompression[float32])(nil)
	_ RedistributingHook[float32] = (*PowerSGD[float32])(nil)
)

// RedistributeLocal is Σ_r locals[r] / size (see above).
func (h *Compression[T]) RedistributeLocal(st HookState[T], locals [][]T, size int) ([]T, error) {
	if st.Kind != compressionStateKind {
		return nil, badState("state of kind %q, this hook's is %q", st.Kind, compressionStateKind)
	}
	return scaledSum(locals, size, size)
}

// RedistributeLocal is the inner Compression's (see above).
func (a *AutoCompression[T]) RedistributeLocal(st HookState[T], locals [][]T, size int) ([]T, error) {
	if st.Kind != autoStateKind {
		return nil, badState("state of kind %q, this hook's is %q", st.Kind, autoStateKind)
	}
	return scaledSum(locals, size, size)
}

// RedistributeLocal is Σ_r locals[r] / len(locals) (see above).
func (p *PowerSGD[T]) RedistributeLocal(st HookState[T], locals [][]T, size int) ([]T, error) {
	if st.Kind != powerSGDStateKind {
		return nil, badState("state of kind %q, this hook's is %q", st.Kind, powerSGDStateKind)
	}
	return scaledSum(locals, len(locals), size)
}

// scaledSum returns Σ_r locals[r] / div, element by element, summed in
// float64 and rounded to T once; the locals must be of one length, and
// size (the new group's) positive.
func scaledSum[T Float](locals [][]T, div, size int) ([]T, error) {
	if len(locals) == 0 || size < 1 {
		return nil, fmt.Errorf("ddp: redistributing the residuals of %d ranks over %d", len(locals), size)
	}
	n := len(locals[0])
	for r, l := range locals {
		if len(l) != n {
			return nil, badState("rank %d saved %d residuals, rank 0 %d", r, len(l), n)
		}
	}
	out := make([]T, n)
	for i := range out {
		sum := 0.0
		for _, l := range locals {
			sum += float64(l[i])
		}
		out[i] = T(sum / float64(div))
	}
	return out, nil
}
