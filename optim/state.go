package optim

import (
	"fmt"
	"math"
)

// State is a serialisable snapshot of an optimizer; its layout is described
// in the package documentation. The zero State is not valid.
type State struct {
	Optimizer string   // Name() of the optimizer that wrote it
	DType     string   // DTypeFloat32 or DTypeFloat64
	Step      int64    // completed steps
	Len       int      // elements covered; 0 when Step == 0
	Hyper     []Hyper  // hyper-parameters, in the optimizer's fixed order
	Buffers   []Buffer // per-element buffers, each of length Len
}

// Hyper is one named hyper-parameter value.
type Hyper struct {
	Name  string
	Value float64
}

// Buffer is one named per-element state buffer; Data[i] belongs to params[i].
type Buffer struct {
	Name string
	Data []float64
}

// HyperValue returns the hyper-parameter called name.
func (s State) HyperValue(name string) (float64, bool) {
	for _, h := range s.Hyper {
		if h.Name == name {
			return h.Value, true
		}
	}
	return 0, false
}

// Buffer returns the data of the buffer called name, or nil.
func (s State) Buffer(name string) []float64 {
	for _, b := range s.Buffers {
		if b.Name == name {
			return b.Data
		}
	}
	return nil
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	c := s
	c.Hyper = append([]Hyper(nil), s.Hyper...)
	if s.Buffers != nil {
		c.Buffers = make([]Buffer, len(s.Buffers))
		for i, b := range s.Buffers {
			c.Buffers[i] = Buffer{Name: b.Name, Data: append([]float64(nil), b.Data...)}
		}
	}
	return c
}

// Validate checks the structure of s, independent of any optimizer: a known
// DType, Step >= 0, Len >= 0 (and 0 when Step == 0, with no buffers), unique
// names, every buffer of length Len, and float32 buffers holding only values
// a float32 can represent.
func (s State) Validate() error {
	if s.Optimizer == "" {
		return fmt.Errorf("%w: empty Optimizer name", ErrState)
	}
	if s.DType != DTypeFloat32 && s.DType != DTypeFloat64 {
		return fmt.Errorf("%w: %s: DType %q, want %q or %q", ErrState, s.Optimizer, s.DType, DTypeFloat32, DTypeFloat64)
	}
	if s.Step < 0 || s.Len < 0 {
		return fmt.Errorf("%w: %s: Step = %d, Len = %d, want both >= 0", ErrState, s.Optimizer, s.Step, s.Len)
	}
	if s.Step == 0 && (s.Len != 0 || len(s.Buffers) != 0) {
		return fmt.Errorf("%w: %s: Step = 0 but Len = %d and %d buffers, want 0 and none", ErrState, s.Optimizer, s.Len, len(s.Buffers))
	}
	for i, h := range s.Hyper {
		for _, h2 := range s.Hyper[:i] {
			if h.Name == h2.Name {
				return fmt.Errorf("%w: %s: hyper-parameter %q appears twice", ErrState, s.Optimizer, h.Name)
			}
		}
	}
	for i, b := range s.Buffers {
		for _, b2 := range s.Buffers[:i] {
			if b.Name == b2.Name {
				return fmt.Errorf("%w: %s: buffer %q appears twice", ErrState, s.Optimizer, b.Name)
			}
		}
		if len(b.Data) != s.Len {
			return fmt.Errorf("%w: %s: buffer %q has %d elements, Len = %d", ErrState, s.Optimizer, b.Name, len(b.Data), s.Len)
		}
		if s.DType == DTypeFloat32 {
			for j, v := range b.Data {
				if float64(float32(v)) != v && !math.IsNaN(v) {
					return fmt.Errorf("%w: %s: buffer %q[%d] = %v is not a float32 value", ErrState, s.Optimizer, b.Name, j, v)
				}
			}
		}
	}
	return nil
}

// compatible reports why shard states a and b (at indices ia, ib) cannot be
// concatenated, or nil.
func compatible(a, b State, ia, ib int) error {
	switch {
	case a.Optimizer != b.Optimizer:
		return fmt.Errorf("%w: shard %d is %q, shard %d is %q", ErrState, ia, a.Optimizer, ib, b.Optimizer)
	case a.DType != b.DType:
		return fmt.Errorf("%w: shard %d DType %q, shard %d DType %q", ErrState, ia, a.DType, ib, b.DType)
	case a.Step != b.Step:
		return fmt.Errorf("%w: shard %d Step %d, shard %d Step %d", ErrState, ia, a.Step, ib, b.Step)
	case len(a.Hyper) != len(b.Hyper):
		return fmt.Errorf("%w: shard %d has %d hyper-parameters, shard %d has %d", ErrState, ia, len(a.Hyper), ib, len(b.Hyper))
	case len(a.Buffers) != len(b.Buffers):
		return fmt.Errorf("%w: shard %d has %d buffers, shard %d has %d", ErrState, ia, len(a.Buffers), ib, len(b.Buffers))
	}
	for k := range a.Hyper {
		ha, hb := a.Hyper[k], b.Hyper[k]
		if ha.Name != hb.Name || math.Float64bits(ha.Value) != math.Float64bits(hb.Value) {
			return fmt.Errorf("%w: shard %d hyper-parameter %s = %v, shard %d %s = %v", ErrState, ia, ha.Name, ha.Value, ib, hb.Name, hb.Value)
		}
	}
	for k := range a.Buffers {
		if a.Buffers[k].Name != b.Buffers[k].Name {
			return fmt.Errorf("%w: shard %d buffer %d is %q, shard %d buffer %d is %q", ErrState, ia, k, a.Buffers[k].Name, ib, k, b.Buffers[k].Name)
		}
	}
	return nil
}

// ConcatStates joins the states of consecutive shards, given in arena order
// (rank 0's shard first), into the state of the whole: Len is the sum of the
// shards' Len and each buffer is the concatenation of the shards' buffers.
// Every shard must be valid and agree on Optimizer, DType, Step,
// hyper-parameters (bitwise) and buffer names; the error names the first
// disagreeing shard and field. Shards with Len 0 (ranks owning an empty chunk)
// are fine. The result shares no memory with the inputs.
func ConcatStates(shards []State) (State, error) {
	if len(shards) == 0 {
		return State{}, fmt.Errorf("%w: ConcatStates: no shards", ErrState)
	}
	total := 0
	for i, s := range shards {
		if err := s.Validate(); err != nil {
			return State{}, fmt.Errorf("shard %d: %w", i, err)
		}
		if i > 0 {
			if err := compatible(shards[0], s, 0, i); err != nil {
				return State{}, err
			}
		}
		total += s.Len
	}
	first := shards[0]
	out := State{
		Optimizer: first.Optimizer,
		DType:     first.DType,
		Step:      first.Step,
		Len:       total,
		Hyper:     append([]Hyper(nil), first.Hyper...),
	}
	if len(first.Buffers) > 0 {
		out.Buffers = make([]Buffer, len(first.Buffers))
		for k, b := range first.Buffers {
			var data []float64
			if total > 0 {
				data = make([]float64, 0, total)
			}
			for _, s := range shards {
				data = append(data, s.Buffers[k].Data...)
			}
			out.Buffers[k] = Buffer{Name: b.Name, Data: data}
		}
	}
	return out, nil
}

// SliceState cuts the state of elements [lo,hi) out of s, the state of a whole
// arena (or of a larger shard): Len becomes hi-lo and every buffer is copied
// from [lo,hi). It needs 0 <= lo <= hi <= s.Len; a state from before the
// first step (Step == 0, which has Len 0 and no buffers) may be cut at any
// 0 <= lo <= hi and stays such a state. The result shares no memory with s.
func SliceState(s State, lo, hi int) (State, error) {
	if err := s.Validate(); err != nil {
		return State{}, err
	}
	limit := s.Len
	if s.Step == 0 {
		limit = hi
	}
	if lo < 0 || lo > hi || hi > limit {
		return State{}, fmt.Errorf("%w: SliceState [%d,%d) out of range for Len %d", ErrState, lo, hi, s.Len)
	}
	out := State{
		Optimizer: s.Optimizer,
		DType:     s.DType,
		Step:      s.Step,
		Hyper:     append([]Hyper(nil), s.Hyper...),
	}
	if s.Step == 0 {
		return out, nil
	}
	out.Len = hi - lo
	if len(s.Buffers) > 0 {
		out.Buffers = make([]Buffer, len(s.Buffers))
		for k, b := range s.Buffers {
			out.Buffers[k] = Buffer{Name: b.Name, Data: append([]float64(nil), b.Data[lo:hi]...)}
		}
	}
	return out, nil
}

// lookupHypers reads the named hyper-parameters of s, in order, into dst,
// failing on a missing or unknown name.
func lookupHypers(s State, names []string, dst []float64) error {
	for i, n := range names {
		v, ok := s.HyperValue(n)
		if !ok {
			return fmt.Errorf("%w: %s: state lacks hyper-parameter %q", ErrState, s.Optimizer, n)
		}
		dst[i] = v
	}
	for _, h := range s.Hyper {
		known := false
		for _, n := range names {
			known = known || h.Name == n
		}
		if !known {
			return fmt.Errorf("%w: %s: unknown hyper-parameter %q", ErrState, s.Optimizer, h.Name)
		}
	}
	return nil
}

// checkHeader checks s against the optimizer name and element type T.
func checkHeader[T Float](s State, name string) error {
	if s.Optimizer != name {
		return fmt.Errorf("%w: state is for %q, optimizer is %q", ErrState, s.Optimizer, name)
	}
	if err := s.Validate(); err != nil {
		return err
	}
	if dt := dtypeOf[T](); s.DType != dt {
		return fmt.Errorf("%w: %s: state DType %q, optimizer element type %s", ErrState, name, s.DType, dt)
	}
	return nil
}

// checkBuffers checks that s holds exactly the named buffers, in any order.
func checkBuffers(s State, names ...string) error {
	if len(s.Buffers) != len(names) {
		got := make([]string, len(s.Buffers))
		for i, b := range s.Buffers {
			got[i] = b.Name
		}
		return fmt.Errorf("%w: %s at step %d: buffers %q, want %q", ErrState, s.Optimizer, s.Step, got, names)
	}
	for _, n := range names {
		found := false
		for _, b := range s.Buffers {
			found = found || b.Name == n
		}
		if !found {
			return fmt.Errorf("%w: %s: state lacks buffer %q", ErrState, s.Optimizer, n)
		}
	}
	return nil
}

// toFloat64 copies a T slice into a new []float64 (lossless); empty gives nil,
// as gob decoding does.
func toFloat64[T Float](src []T) []float64 {
	if len(src) == 0 {
		return nil
	}
	out := make([]float64, len(src))
	for i, v := range src {
		out[i] = float64(v)
	}
	return out
}

// loadInto copies src into dst (reusing dst's memory when it has room) and
// returns it.
func loadInto[T Float](dst []T, src []float64) []T {
	if cap(dst) >= len(src) {
		dst = dst[:len(src)]
	} else {
		dst = make([]T, len(src))
	}
	for i, v := range src {
		dst[i] = T(v)
	}
	return dst
}
