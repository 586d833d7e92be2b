package ddp

import (
	"encoding/json"
	"math/rand/v2"
)

// powerMeta is PowerSGD's Meta: the configuration it was saved under (a
// state loads only into a hook of the same), the step count, the random
// generator's state and each bucket's state sizes.
type powerMeta struct {
	Config  PowerSGDConfig    `json:"config"`
	Iter    int               `json:"iter"`
	RNG     []byte            `json:"rng"` // math/rand/v2 PCG's MarshalBinary
	Buckets []powerBucketMeta `json:"buckets"`
}

// powerBucketMeta is one bucket in powerMeta: its element count, its Q's
// length (Shared holds the Qs in bucket order) and whether its Q has been
// drawn (warm start). Residuals, with error feedback, are Size long each
// (Local, in bucket order).
type powerBucketMeta struct {
	Index      int  `json:"index"`
	Size       int  `json:"size"`
	QLen       int  `json:"q_len"`
	Randomised bool `json:"randomised"`
}

// HookState is PowerSGD's state: step count, generator, and per bucket
// its warm-start Q (Shared) and residuals (Local). The Ps are not state:
// each step computes them afresh from M and Q.
func (p *PowerSGD[T]) HookState() (HookState[T], error) {
	rng, err := p.pcg.MarshalBinary()
	if err != nil {
		return HookState[T]{}, err
	}
	meta := powerMeta{Config: p.cfg, Iter: p.iter, RNG: rng, Buckets: []powerBucketMeta{}}
	var shared, local []T
	for _, i := range sortedKeys(p.buckets) {
		st := p.buckets[i]
		meta.Buckets = append(meta.Buckets, powerBucketMeta{Index: i, Size: st.size, QLen: len(st.q), Randomised: st.randomised})
		shared = append(shared, st.q...)
		local = append(local, st.errs...)
	}
	js, err := json.Marshal(meta)
	return HookState[T]{Kind: powerSGDStateKind, Meta: js, Shared: shared, Local: local}, err
}

// LoadHookState restores HookState's state; each bucket is planned again
// at its next step, keeping the loaded Q and residuals.
func (p *PowerSGD[T]) LoadHookState(st HookState[T], local []T) error {
	if st.Kind != powerSGDStateKind {
		return badState("state of kind %q, this hook's is %q", st.Kind, powerSGDStateKind)
	}
	var meta powerMeta
	if err := json.Unmarshal(st.Meta, &meta); err != nil {
		return badState("PowerSGD state: %v", err)
	}
	if meta.Config != p.cfg {
		return badState("PowerSGD state saved under %+v, this hook has %+v", meta.Config, p.cfg)
	}
	if meta.Iter < 0 {
		return badState("PowerSGD state: step %d", meta.Iter)
	}
	pcg := &rand.PCG{}
	if err := pcg.UnmarshalBinary(meta.RNG); err != nil {
		return badState("PowerSGD state: the generator: %v", err)
	}
	shared := st.Shared
	buckets := make(map[int]*powerBucket[T], len(meta.Buckets))
	for _, b := range meta.Buckets {
		if b.Index < 0 || b.Size < 0 || b.QLen < 0 || b.QLen > len(shared) || buckets[b.Index] != nil {
			return badState("PowerSGD state: bucket %d (%d elements, %d Q values) with %d Q values left", b.Index, b.Size, b.QLen, len(shared))
		}
		pb := &powerBucket[T]{size: b.Size, q: append([]T(nil), shared[:b.QLen]...), randomised: b.Randomised}
		shared = shared[b.QLen:]
		if p.cfg.ErrorFeedback {
			pb.errs = make([]T, b.Size)
			if local != nil {
				if len(local) < b.Size {
					return badState("PowerSGD state: %d residuals for bucket %d of %d elements", len(local), b.Index, b.Size)
				}
				copy(pb.errs, local[:b.Size])
				local = local[b.Size:]
			}
		}
		buckets[b.Index] = pb
	}
	if len(shared) != 0 || len(local) != 0 {
		return badState("PowerSGD state: %d Q values and %d residuals beyond the buckets'", len(shared), len(local))
	}
	p.iter, p.pcg, p.rng, p.buckets = meta.Iter, pcg, rand.New(pcg), buckets
	return nil
}
