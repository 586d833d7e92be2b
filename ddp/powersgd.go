package ddp

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/internal/gemm"
)

// PowerSGDConfig configures PowerSGD (Vogels et al., "PowerSGD: Practical
// low-rank gradient compression for distributed optimization", 2019), as
// PyTorch's PowerSGDState does; DefaultPowerSGDConfig gives PyTorch's
// defaults.
type PowerSGDConfig struct {
	// Rank is the rank r of the approximation M ≈ P·Qᵀ
	// (matrix_approximation_rank; at most min(n, m) of each matrix).
	Rank int
	// StartIter is the number of steps reduced by the plain all-reduce
	// (Avg) before compression starts (start_powerSGD_iter).
	StartIter int
	// MinCompressionRate: a matrix of n×m is compressed only when
	// (n+m)·r·MinCompressionRate < n·m (min_compression_rate); the others,
	// and every 1-D tensor (biases), are all-reduced uncompressed.
	MinCompressionRate float64
	// ErrorFeedback adds the last step's error (this rank's input minus
	// what the hook returned) to the gradient before compressing
	// (use_error_feedback).
	ErrorFeedback bool
	// WarmStart reuses the last step's Q as the next step's starting point
	// instead of a fresh random one (warm_start).
	WarmStart bool
	// OrthogonalizationEpsilon is added to each column's norm before
	// dividing by it (orthogonalization_epsilon): 0 divides by the norm
	// alone, and a zero column stays zero (where PyTorch's division by a
	// zero norm would leave NaNs).
	OrthogonalizationEpsilon float64
	// Seed seeds the random Qs (random_seed); every rank draws the same.
	Seed uint64
}

// DefaultPowerSGDConfig is PyTorch's PowerSGDState defaults: rank 1,
// compression from step 1000, minimum compression rate 2, error feedback
// and warm start on, epsilon 0, seed 0.
func DefaultPowerSGDConfig() PowerSGDConfig {
	return PowerSGDConfig{Rank: 1, StartIter: 1000, MinCompressionRate: 2, ErrorFeedback: true, WarmStart: true}
}

// PowerSGD is the PowerSGD communication hook (PyTorch's powerSGD_hook).
// For each bucket, once StartIter steps have passed:
//
//  1. With error feedback, add the bucket's error to the buffer and keep a
//     copy of the sum (the input).
//  2. View each parameter's gradient as a matrix M of n = shape[0] rows
//     and m = the rest columns; those that pass the compression test are
//     compressed, the others (1-D tensors among them) are gathered into
//     one contiguous buffer.
//  3. Each compressed M gets an n×r P and an m×r Q, all Ps of a bucket in
//     one buffer and all Qs in another. Q is this bucket's last Q
//     (warm start) or, at the first compressed step, standard normal
//     values from a generator seeded by Seed; either way orthogonalised.
//  4. P = M·Q for each matrix.
//  5. All-reduce the uncompressed buffer (Sum), divide by the group size
//     and copy back.
//  6. All-reduce the Ps (Sum), orthogonalise each P (Gram-Schmidt),
//     compute Q = Mᵀ·P, all-reduce the Qs (Sum) and divide them by the
//     group size.
//  7. M = P·Qᵀ, written into the buffer.
//  8. With error feedback, the bucket's error is the input minus the
//     buffer.
//
// The step count advances when the last bucket is done. Every rank must
// see the same buckets in the same order; the random Qs are then the same
// on every rank. PyTorch orthogonalises rank > 2 by a QR factorisation,
// which gives the same columns up to their signs and rounding; P·Pᵀ, and
// so the result, does not depend on the signs.
type PowerSGD[T Float] struct {
	cfg     PowerSGDConfig
	iter    int
	pcg     *rand.PCG  // rng's source, whose state a checkpoint saves
	rng     *rand.Rand // draws each bucket's seed for its random Qs
	buckets map[int]*powerBucket[T]
	// initQ fills a fresh Q; nil draws standard normal values seeded by
	// seed. Tests set it to PyTorch's values.
	initQ func(q []T, seed uint64)
	mm    gemm.Implementation // the products' BLAS, one thread
	dots  []T                 // orthogonalize's scratch, Rank long
}

// powerBucket is one bucket's PowerSGD state.
type powerBucket[T Float] struct {
	size       int // buffer length this plan is for
	mats       []powerMatrix
	plain      [][2]int // uncompressed element ranges of the buffer
	plainBuf   []T
	p, q       []T
	errs, in   []T // error feedback and the input copy
	randomised bool
	planned    bool // false: loaded from a HookState, mats and plain not yet known
}

// powerMatrix is one compressed gradient: buffer[off:off+n·m] as an n×m
// row-major matrix, its P at p[pOff:pOff+n·r], its Q at q[qOff:qOff+m·r].
type powerMatrix struct {
	off, n, m, r, pOff, qOff int
}

// NewPowerSGD returns a PowerSGD hook for one DDP.
func NewPowerSGD[T Float](cfg PowerSGDConfig) (*PowerSGD[T], error) {
	switch {
	case cfg.Rank < 1:
		return nil, fmt.Errorf("ddp: PowerSGD rank %d: want at least 1", cfg.Rank)
	case cfg.StartIter < 0:
		return nil, fmt.Errorf("ddp: PowerSGD start iteration %d is negative", cfg.StartIter)
	case !(cfg.MinCompressionRate > 0) || math.IsInf(cfg.MinCompressionRate, 0):
		return nil, fmt.Errorf("ddp: PowerSGD minimum compression rate %v: want a finite number above 0", cfg.MinCompressionRate)
	case !(cfg.OrthogonalizationEpsilon >= 0) || math.IsInf(cfg.OrthogonalizationEpsilon, 0):
		return nil, fmt.Errorf("ddp: PowerSGD orthogonalization epsilon %v: want a finite number ≥ 0", cfg.OrthogonalizationEpsilon)
	}
	v, err := gemm.Best()
	if err != nil {
		return nil, fmt.Errorf("ddp: PowerSGD's matrix products: %w", err)
	}
	// One thread: the hook runs beside the backward pass, and in-process
	// ranks share the cores.
	mm := gemm.New(v, 1)
	pcg := rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)
	return &PowerSGD[T]{cfg: cfg, pcg: pcg, rng: rand.New(pcg), buckets: map[int]*powerBucket[T]{},
		mm: mm, dots: make([]T, cfg.Rank)}, nil
}

// Iter is the number of steps seen (PowerSGDState.iter).
func (p *PowerSGD[T]) Iter() int { return p.iter }

// Reduce is the hook (see PowerSGD).
func (p *PowerSGD[T]) Reduce(ctx context.Context, b *GradBucket[T]) error {
	if p.iter < p.cfg.StartIter {
		if err := allreduce.AllReduce(ctx, b.group, b.buffer, allreduce.Avg); err != nil {
			return err
		}
		p.advance(b)
		return nil
	}
	st, err := p.bucket(b)
	if err != nil {
		return err
	}
	buf := b.buffer
	if p.cfg.ErrorFeedback {
		for i, e := range st.errs {
			v := buf[i] + e
			buf[i], st.in[i] = v, v
		}
	}
	if err := p.compress(ctx, b, st); err != nil {
		return err
	}
	if p.cfg.ErrorFeedback {
		for i, v := range st.in {
			st.errs[i] = v - buf[i]
		}
	}
	p.advance(b)
	return nil
}

func (p *PowerSGD[T]) advance(b *GradBucket[T]) {
	if b.last {
		p.iter++
	}
}

// compress is steps 3 to 7 of PowerSGD on st's plan.
func (p *PowerSGD[T]) compress(ctx context.Context, b *GradBucket[T], st *powerBucket[T]) error {
	buf, g := b.buffer, b.group
	if !p.cfg.WarmStart || !st.randomised {
		seed := p.rng.Uint64() // one draw per bucket and randomisation, as PyTorch's rng.randint
		p.fillQ(st.q, seed)
		st.randomised = true
	}
	for _, mt := range st.mats {
		orthogonalize(st.q[mt.qOff:mt.qOff+mt.m*mt.r], mt.m, mt.r, p.cfg.OrthogonalizationEpsilon, p.dots)
		mulNN(p.mm, st.p[mt.pOff:mt.pOff+mt.n*mt.r], buf[mt.off:mt.off+mt.n*mt.m], st.q[mt.qOff:mt.qOff+mt.m*mt.r], mt.n, mt.m, mt.r)
	}
	n := T(g.Size())
	if len(st.plainBuf) > 0 {
		k := 0
		for _, r := range st.plain {
			k += copy(st.plainBuf[k:], buf[r[0]:r[1]])
		}
		if err := allreduce.AllReduce(ctx, g, st.plainBuf, allreduce.Sum); err != nil {
			return fmt.Errorf("PowerSGD uncompressed tensors: %w", err)
		}
		k = 0
		for _, r := range st.plain {
			for i := r[0]; i < r[1]; i++ {
				buf[i] = st.plainBuf[k] / n
				k++
			}
		}
	}
	if len(st.mats) == 0 {
		return nil
	}
	if err := allreduce.AllReduce(ctx, g, st.p, allreduce.Sum); err != nil {
		return fmt.Errorf("PowerSGD P: %w", err)
	}
	for _, mt := range st.mats {
		pm := st.p[mt.pOff : mt.pOff+mt.n*mt.r]
		orthogonalize(pm, mt.n, mt.r, p.cfg.OrthogonalizationEpsilon, p.dots)
		mulTN(p.mm, st.q[mt.qOff:mt.qOff+mt.m*mt.r], buf[mt.off:mt.off+mt.n*mt.m], pm, mt.n, mt.m, mt.r)
	}
	if err := allreduce.AllReduce(ctx, g, st.q, allreduce.Sum); err != nil {
		return fmt.Errorf("PowerSGD Q: %w", err)
	}
	for i := range st.q {
		st.q[i] /= n
	}
	for _, mt := range st.mats {
		mulNT(p.mm, buf[mt.off:mt.off+mt.n*mt.m], st.p[mt.pOff:mt.pOff+mt.n*mt.r], st.q[mt.qOff:mt.qOff+mt.m*mt.r], mt.n, mt.m, mt.r)
	}
	return nil
}

// fillQ fills q with standard normal values from seed (or initQ's).
func (p *PowerSGD[T]) fillQ(q []T, seed uint64) {
	if p.initQ != nil {
		p.initQ(q, seed)
		return
	}
	r := rand.New(rand.NewPCG(seed, 0))
	for i := range q {
		q[i] = T(r.NormFloat64())
	}
}

// bucket returns b's state, planning it at the bucket's first compressed
// step (or the first after LoadHookState, keeping the loaded Q, residuals
// and randomised flag).
func (p *PowerSGD[T]) bucket(b *GradBucket[T]) (*powerBucket[T], error) {
	old, ok := p.buckets[b.index]
	if ok && old.size != len(b.buffer) {
		return nil, fmt.Errorf("PowerSGD: bucket %d has %d elements, %d before", b.index, len(b.buffer), old.size)
	}
	if ok && old.planned {
		return old, nil
	}
	st, err := p.plan(b)
	if err != nil {
		return nil, err
	}
	if ok {
		if len(old.q) != len(st.q) {
			return nil, fmt.Errorf("PowerSGD: bucket %d: the loaded state has %d Q values, the bucket's plan %d", b.index, len(old.q), len(st.q))
		}
		st.q, st.randomised = old.q, old.randomised
		if old.errs != nil {
			st.errs = old.errs
		}
	}
	p.buckets[b.index] = st
	return st, nil
}

// plan is b's state at its first compressed step: which gradients are
// compressed (the test of PowerSGDConfig's MinCompressionRate) and where
// their Ps and Qs go.
func (p *PowerSGD[T]) plan(b *GradBucket[T]) (*powerBucket[T], error) {
	st := &powerBucket[T]{size: len(b.buffer), planned: true}
	pLen, qLen, plain := 0, 0, 0
	for k := range b.params {
		off, size, shape := b.offsets[k], b.sizes[k], b.shapes[k]
		n := 1
		if len(shape) > 0 {
			n = shape[0]
		}
		if n <= 0 || size%n != 0 {
			return nil, fmt.Errorf("PowerSGD: parameter %d has shape %v and %d elements", b.params[k], shape, size)
		}
		m := size / n
		r := min(n, m, p.cfg.Rank)
		if float64((n+m)*r)*p.cfg.MinCompressionRate < float64(n*m) {
			st.mats = append(st.mats, powerMatrix{off: off, n: n, m: m, r: r, pOff: pLen, qOff: qLen})
			pLen += n * r
			qLen += m * r
			continue
		}
		if k := len(st.plain) - 1; k >= 0 && st.plain[k][1] == off {
			st.plain[k][1] += size
		} else {
			st.plain = append(st.plain, [2]int{off, off + size})
		}
		plain += size
	}
	st.p, st.q, st.plainBuf = make([]T, pLen), make([]T, qLen), make([]T, plain)
	if p.cfg.ErrorFeedback {
		st.errs, st.in = make([]T, len(b.buffer)), make([]T, len(b.buffer))
	}
	return st, nil
}
