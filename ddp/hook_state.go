package ddp

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Hook state in checkpoints. A compressing hook carries state from step
// to step that a resumed run needs to continue bitwise as if never
// stopped: the error-feedback residuals, PowerSGD's warm-start Qs, its
// step count and random generator, AutoCompression's decisions. A
// HookState splits that state by where it lives:
//
//   - Meta: the scalars and the per-bucket plan, identical on every rank
//     (JSON, the hook's own schema, versioned by Kind);
//   - Shared: element values identical on every rank (PowerSGD's Qs are
//     all-reduced, so every rank holds the same ones);
//   - Local: this rank's own values (the residuals: each rank's input
//     minus what the hook returned, which differs per rank).
//
// Scratch that every step overwrites before reading (PowerSGD's P, the
// 16-bit payload) is not state. A checkpoint stores Meta and Shared once
// and every rank's Local. Resumed on another world size, the Local parts
// no longer map onto the ranks: a RedistributingHook gives every new rank
// a share of their sum that keeps the next step's averaged input
// (hook_state_redistribute.go); LoadHookState with local nil zeroes the
// residuals instead (the first step after it is that of a fresh hook's
// error feedback; the rest of the state is kept).

// HookState is a StatefulHook's state between steps (see above).
type HookState[T Float] struct {
	Kind   string // the hook and its state's schema version, e.g. "powersgd/1"
	Meta   []byte // JSON, the same on every rank
	Shared []T    // the same on every rank
	Local  []T    // this rank's own
}

// StatefulHook is a CommHook whose state a checkpoint can carry. Both
// methods are called between steps, never during one.
type StatefulHook[T Float] interface {
	CommHook[T]
	// HookState is a copy of the hook's state.
	HookState() (HookState[T], error)
	// LoadHookState replaces the hook's state by st, which HookState of a
	// hook of the same kind and configuration returned. With local nil
	// (st.Local ignored) the residuals start at zero.
	LoadHookState(st HookState[T], local []T) error
}

// CommHook is the communication hook given with WithCommHook (nil
// without): a StatefulHook's state is what a checkpoint saves.
func (d *DDP[T]) CommHook() CommHook[T] {
	h, _ := d.cfg.hook.(CommHook[T])
	return h
}

// The kinds of state the built-in hooks write.
const (
	compressionStateKind = "compression/1"
	autoStateKind        = "auto-compression/1"
	powerSGDStateKind    = "powersgd/1"
)

// errBadHookState is wrapped by every error about a state that does not
// fit the hook loading it.
var errBadHookState = errors.New("hook state does not fit this hook")

func badState(format string, args ...any) error {
	return fmt.Errorf("ddp: %w: %s", errBadHookState, fmt.Sprintf(format, args...))
}

// bucketLen is one bucket's length in a state's Meta.
type bucketLen struct {
	Index int `json:"index"`
	Len   int `json:"len"`
}

// compressionMeta is Compression's Meta.
type compressionMeta struct {
	Format   string      `json:"format"`
	Feedback bool        `json:"error_feedback"`
	Buckets  []bucketLen `json:"buckets"` // in index order
}

// sortedKeys is m's keys in increasing order.
func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// HookState is the residuals of every bucket seen (Local, in bucket
// index order; none without error feedback).
func (h *Compression[T]) HookState() (HookState[T], error) {
	meta := compressionMeta{Format: h.format.String(), Feedback: h.feed, Buckets: []bucketLen{}}
	var local []T
	for _, i := range sortedKeys(h.buckets) {
		st := h.buckets[i]
		meta.Buckets = append(meta.Buckets, bucketLen{i, len(st.c)})
		local = append(local, st.errs...)
	}
	js, err := json.Marshal(meta)
	return HookState[T]{Kind: compressionStateKind, Meta: js, Local: local}, err
}

// LoadHookState restores HookState's buckets and residuals.
func (h *Compression[T]) LoadHookState(st HookState[T], local []T) error {
	if st.Kind != compressionStateKind {
		return badState("state of kind %q, this hook's is %q", st.Kind, compressionStateKind)
	}
	var meta compressionMeta
	if err := json.Unmarshal(st.Meta, &meta); err != nil {
		return badState("compression state: %v", err)
	}
	if meta.Format != h.format.String() || meta.Feedback != h.feed {
		return badState("the state is of %s compression with error feedback %v, this hook is %s with %v", meta.Format, meta.Feedback, h.format, h.feed)
	}
	buckets, rest, err := h.loadBuckets(meta.Buckets, local)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return badState("compression state: %d residuals beyond the buckets'", len(rest))
	}
	h.buckets = buckets
	return nil
}

// loadBuckets builds the buckets lens lists with their residuals taken
// from the front of local (zero with local nil), and returns what is
// left of local.
func (h *Compression[T]) loadBuckets(lens []bucketLen, local []T) (map[int]*halfBucket[T], []T, error) {
	buckets := make(map[int]*halfBucket[T], len(lens))
	for _, b := range lens {
		if b.Len < 0 || b.Index < 0 || buckets[b.Index] != nil {
			return nil, nil, badState("compression state: bucket %d of %d elements", b.Index, b.Len)
		}
		st := &halfBucket[T]{c: make([]uint16, b.Len)}
		if h.feed {
			st.errs = make([]T, b.Len)
			if local != nil {
				if len(local) < b.Len {
					return nil, nil, badState("compression state: %d residuals for bucket %d of %d elements", len(local), b.Index, b.Len)
				}
				copy(st.errs, local[:b.Len])
				local = local[b.Len:]
			}
		}
		buckets[b.Index] = st
	}
	return buckets, local, nil
}

// autoMeta is AutoCompression's Meta.
type autoMeta struct {
	Decided map[int]bool    `json:"decided"`
	Inner   json.RawMessage `json:"inner"`
}

// HookState is the decisions taken and the inner Compression's state.
func (a *AutoCompression[T]) HookState() (HookState[T], error) {
	inner, err := a.inner.HookState()
	if err != nil {
		return HookState[T]{}, err
	}
	js, err := json.Marshal(autoMeta{Decided: a.decided, Inner: inner.Meta})
	return HookState[T]{Kind: autoStateKind, Meta: js, Local: inner.Local}, err
}

// LoadHookState restores the decisions and the inner state, so a resumed
// run compresses the same buckets without timing again.
func (a *AutoCompression[T]) LoadHookState(st HookState[T], local []T) error {
	if st.Kind != autoStateKind {
		return badState("state of kind %q, this hook's is %q", st.Kind, autoStateKind)
	}
	var meta autoMeta
	if err := json.Unmarshal(st.Meta, &meta); err != nil {
		return badState("auto compression state: %v", err)
	}
	if err := a.inner.LoadHookState(HookState[T]{Kind: compressionStateKind, Meta: meta.Inner}, local); err != nil {
		return err
	}
	a.decided = meta.Decided
	if a.decided == nil {
		a.decided = map[int]bool{}
	}
	return nil
}
