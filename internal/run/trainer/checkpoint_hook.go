package trainer

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/internal/safetensors"
)

// The checkpoint's hook section (optional; written when the run has a
// communication hook with state, ddp.StatefulHook: -compress fp16, bf16,
// auto, powersgd). A file without it loads as before, the hook starting
// fresh.
//
//	tensors   hook/shared          the state every rank holds alike (PowerSGD's
//	                               warm-start Qs), model dtype; absent when empty
//	          hook/local/<rank>    rank's own state (error-feedback residuals),
//	                               one per rank of the writing run, model dtype;
//	                               absent when empty
//	metadata  hook.version         "1": this section's layout
//	          hook.kind            the state's kind and schema (ddp.HookState.Kind)
//	          hook.meta            the hook's JSON (ddp.HookState.Meta)
//	          hook.ranks           the writing run's world size
//	          hook.shared_len, hook.local_len   the tensors' element counts
//
// Resuming on the world size that wrote it, each rank loads its own
// residuals and the run continues bitwise as if never stopped. On another
// world size the residuals do not map onto the ranks, but the next step
// depends only on their sum: every rank loads the share of it that keeps
// the step's averaged input (ddp.RedistributingHook; rank 0 logs it), and
// the rest of the state is loaded as it is. A hook that cannot
// redistribute starts its residuals at zero, with a line.

const (
	hookPrefix      = "hook/"
	hookSharedName  = hookPrefix + "shared"
	hookLocalPrefix = hookPrefix + "local/"
	hookVersion     = "1"
)

// hookSection is the hook state of every rank, as a checkpoint holds it.
type hookSection struct {
	kind   string
	meta   string
	ranks  int
	shared []float64
	local  [][]float64 // per rank of the writing run; nil without residuals
}

// statefulHook is d's communication hook when it has state, else nil.
func statefulHook[T Float](d *ddp.DDP[T]) ddp.StatefulHook[T] {
	h, _ := d.CommHook().(ddp.StatefulHook[T])
	return h
}

// gatherHookState gathers every rank's hook state to root (nil elsewhere,
// and without a stateful hook). Every rank calls it.
func gatherHookState[T Float](ctx context.Context, g *allreduce.Group, d *ddp.DDP[T], root int) (*hookSection, error) {
	h := statefulHook(d)
	if h == nil {
		return nil, nil
	}
	st, err := h.HookState()
	if err != nil {
		return nil, fmt.Errorf("trainer: the communication hook's state: %w", err)
	}
	// Every rank's residuals have the bucket layout's length; check that
	// before gathering them as equal parts.
	n := float64(len(st.Local))
	lens := []float64{n, -n}
	if err := allreduce.AllReduce(ctx, g, lens, allreduce.Max); err != nil {
		return nil, fmt.Errorf("trainer: agreeing on the hook state's length: %w", err)
	}
	if lens[0] != -lens[1] {
		return nil, fmt.Errorf("trainer: the ranks' hook states differ in length (%v to %v elements)", -lens[1], lens[0])
	}
	all := make([]T, g.Size()*len(st.Local))
	if len(st.Local) > 0 {
		if err := allreduce.AllGather(ctx, g, all, st.Local); err != nil {
			return nil, fmt.Errorf("trainer: gathering the hook state: %w", err)
		}
	}
	if g.Rank() != root {
		return nil, nil
	}
	s := &hookSection{kind: st.Kind, meta: string(st.Meta), ranks: g.Size(), shared: widen(st.Shared)}
	for r := range g.Size() {
		if len(st.Local) > 0 {
			s.local = append(s.local, widen(all[r*len(st.Local):(r+1)*len(st.Local)]))
		}
	}
	return s, nil
}

func widen[T Float](xs []T) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

func narrow[T Float](xs []float64) []T {
	out := make([]T, len(xs))
	for i, x := range xs {
		out[i] = T(x) // exact: written from T values
	}
	return out
}

// addHookSection adds s's tensors, in T, and metadata.
func addHookSection[T Float](s *hookSection, tensors []safetensors.Tensor, meta map[string]string) ([]safetensors.Tensor, error) {
	if s == nil {
		return tensors, nil
	}
	add := func(name string, data []float64) error {
		if len(data) == 0 {
			return nil
		}
		t, err := safetensors.New(name, []int{len(data)}, narrow[T](data))
		tensors = append(tensors, t)
		return err
	}
	if err := add(hookSharedName, s.shared); err != nil {
		return nil, err
	}
	for r, l := range s.local {
		if err := add(hookLocalPrefix+strconv.Itoa(r), l); err != nil {
			return nil, err
		}
	}
	meta["hook.version"] = hookVersion
	meta["hook.kind"] = s.kind
	meta["hook.meta"] = s.meta
	meta["hook.ranks"] = strconv.Itoa(s.ranks)
	meta["hook.shared_len"] = strconv.Itoa(len(s.shared))
	localLen := 0
	if len(s.local) > 0 {
		localLen = len(s.local[0])
	}
	meta["hook.local_len"] = strconv.Itoa(localLen)
	return tensors, nil
}

// readHook reads the hook section, if the file has one, into c.hook and
// returns how many tensors it has.
func (c *checkpoint) readHook(f *safetensors.File, tag safetensors.DType) (int, error) {
	path, meta := c.path, f.Metadata
	n := 0
	for _, t := range f.Tensors {
		if strings.HasPrefix(t.Name, hookPrefix) {
			n++
		}
	}
	v, ok := meta["hook.version"]
	if !ok {
		if n > 0 {
			return 0, ckErr(path, "%d hook tensors but no hook section in the metadata", n)
		}
		return 0, nil
	}
	if v != hookVersion {
		return 0, ckErr(path, "hook.version = %q, this build reads %q", v, hookVersion)
	}
	m := &metaReader{path: path, meta: meta}
	s := &hookSection{kind: m.str("hook.kind"), meta: m.str("hook.meta"), ranks: m.int("hook.ranks")}
	sharedLen, localLen := m.int("hook.shared_len"), m.int("hook.local_len")
	if m.err != nil {
		return 0, m.err
	}
	if s.ranks < 1 || sharedLen < 0 || localLen < 0 {
		return 0, ckErr(path, "hook section of %d ranks, %d shared and %d local elements", s.ranks, sharedLen, localLen)
	}
	read := func(name string, want int) ([]float64, int, error) {
		if want == 0 {
			return nil, 0, nil
		}
		t, ok := f.Tensor(name)
		if !ok {
			return nil, 0, ckErr(path, "tensor %q missing", name)
		}
		if t.DType != tag || len(t.Shape) != 1 || t.Shape[0] != want {
			return nil, 0, ckErr(path, "tensor %q is %s%v, want %s[%d]", name, t.DType, t.Shape, tag, want)
		}
		data, err := safetensors.Float64s(t)
		if err != nil {
			return nil, 0, ckErr(path, "%v", err)
		}
		return data, 1, nil
	}
	var err error
	var k, got int
	if s.shared, k, err = read(hookSharedName, sharedLen); err != nil {
		return 0, err
	}
	got += k
	if localLen > 0 && s.ranks > n {
		return 0, ckErr(path, "hook section of %d ranks but %d hook tensors", s.ranks, n)
	}
	for r := range s.ranks {
		if localLen == 0 {
			break // no residuals: s.local stays nil
		}
		l, k, err := read(hookLocalPrefix+strconv.Itoa(r), localLen)
		if err != nil {
			return 0, err
		}
		got += k
		s.local = append(s.local, l)
	}
	if got != n {
		return 0, ckErr(path, "%d hook tensors, the hook section names %d", n, got)
	}
	c.hook = s
	return n, nil
}

// restoreHook loads c's hook section into d's hook, if both exist and
// are of one kind; rank 0 logs what it could not load.
func restoreHook[T Float](c *checkpoint, g *allreduce.Group, d *ddp.DDP[T]) error {
	h := statefulHook(d)
	logf := func(format string, args ...any) {
		if g.Rank() == 0 {
			fmt.Fprintf(os.Stderr, "trainer: resume from %s: "+format+"\n", append([]any{c.path}, args...)...)
		}
	}
	s := c.hook
	switch {
	case h == nil && s == nil:
		return nil
	case h == nil:
		logf("the checkpoint's %s hook state is not used (this run has no compression hook with state)", s.kind)
		return nil
	case s == nil:
		logf("the checkpoint has no compression hook state: the hook starts fresh")
		return nil
	}
	st := ddp.HookState[T]{Kind: s.kind, Meta: []byte(s.meta), Shared: narrow[T](s.shared)}
	var local []T
	switch {
	case s.local == nil:
		local = []T{} // the hook had no residuals
	case s.ranks == g.Size():
		local = narrow[T](s.local[g.Rank()])
	default:
		var err error
		if local, err = redistributeResiduals(h, st, s, g.Size()); err != nil {
			return fmt.Errorf("trainer: resume from %s: %w: the communication hook's state: %w", c.path, ErrMismatch, err)
		}
		if local == nil {
			logf("the hook's residuals were saved by %d ranks, this run has %d, and this hook cannot carry them over: they start at zero", s.ranks, g.Size())
		} else {
			logf("the hook's residuals were saved by %d ranks, this run has %d: redistributed, their sum kept", s.ranks, g.Size())
		}
	}
	if err := h.LoadHookState(st, local); err != nil {
		return fmt.Errorf("trainer: resume from %s: %w: the communication hook's state: %w", c.path, ErrMismatch, err)
	}
	return nil
}

// redistributeResiduals is this rank's share of the residuals s's ranks
// saved, for a run of size ranks (ddp.RedistributingHook); nil when h
// cannot redistribute them.
func redistributeResiduals[T Float](h ddp.StatefulHook[T], st ddp.HookState[T], s *hookSection, size int) ([]T, error) {
	rh, ok := h.(ddp.RedistributingHook[T])
	if !ok {
		return nil, nil
	}
	locals := make([][]T, len(s.local))
	for r, l := range s.local {
		locals[r] = narrow[T](l)
	}
	return rh.RedistributeLocal(st, locals, size)
}
