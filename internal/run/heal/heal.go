package heal

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/optim"
)

// Option changes how Heal runs.
type Option func(*config)

type config struct {
	segment int // the most words per Broadcast
	// corrupt, when set, changes a sender's segment after its digest is
	// taken (tests: a stripe damaged on the wire).
	corrupt func(stripe int, p []byte)
}

// defaultSegment is 8 MiB of words.
const defaultSegment = 1 << 20

// Heal sends the state of the senders (the ranks of g not in joiners) to
// the joiners, as the package documentation's steps say, and checks that
// every rank then holds the same parameters and optimizer state. Every rank
// of g calls it with the same joiners; st is the rank's state (see State).
// On a joiner st is filled only when Heal returns nil. Every rank returns
// the same error for what is judged from shared data (identity, shapes,
// checksums, the replica check); a rank that dies or a collective that
// fails returns the transport's error.
func Heal[T Float](ctx context.Context, g *allreduce.Group, joiners []int, st *State[T], opts ...Option) (Report, error) {
	start := time.Now()
	cfg := config{segment: defaultSegment}
	for _, o := range opts {
		o(&cfg)
	}
	n, rank := g.Size(), g.Rank()
	isJoiner, err := joinerSet(joiners, n)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Joiners: slices.Sorted(slices.Values(joiners))}
	for r := range n {
		if !isJoiner[r] {
			rep.Senders = append(rep.Senders, r)
		}
	}
	h := &healer[T]{cfg: cfg, g: g, st: st, joiner: isJoiner[rank], senders: rep.Senders, joiners: rep.Joiners}
	sent, err := h.run(ctx, isJoiner)
	if err != nil {
		return Report{}, err
	}
	rep.Sent = sent
	rep.StateBytes = int64(h.streamLen())
	if h.hdr.ParamsHeld {
		rep.HeldBytes = int64(len(bytesOf(st.Params)))
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// joinerSet is joiners as a set over a group of n, checked.
func joinerSet(joiners []int, n int) ([]bool, error) {
	isJoiner := make([]bool, n)
	for _, j := range joiners {
		if j < 0 || j >= n || isJoiner[j] {
			return nil, fmt.Errorf("heal: joiners %v: want distinct ranks of the group of %d", joiners, n)
		}
		isJoiner[j] = true
	}
	return isJoiner, nil
}

// Identify is Heal's step 1 alone, for a caller that moves part of the
// state itself before Heal (ZeRO-1's optimizer shards): every rank of g
// calls it with the same joiners and its State, and a joiner of another
// job or attempt, or of another model, is refused on every rank, with
// Heal's errors, before any state moves. (Heal checks it again.)
func Identify[T Float](ctx context.Context, g *allreduce.Group, joiners []int, st *State[T]) error {
	isJoiner, err := joinerSet(joiners, g.Size())
	if err != nil {
		return err
	}
	h := &healer[T]{g: g, st: st, joiner: isJoiner[g.Rank()]}
	_, _, err = h.identify(ctx, isJoiner)
	return err
}

// identify is step 1: the descriptors all-gathered and judged. A sender
// encodes its header (h.hdr) for its digest; it returns the encoding and
// the descriptors.
func (h *healer[T]) identify(ctx context.Context, isJoiner []bool) ([]byte, [][]int64, error) {
	var hb []byte
	var hd [4]int64
	if !h.joiner {
		var err error
		h.hdr = headerOf(h.st)
		if hb, err = encodeHeader(h.hdr); err != nil {
			h.g.Abort(err)
			return nil, nil, err
		}
		hd = digestOf(hb)
	}
	n := h.g.Size()
	all := make([]int64, n*descWords)
	if err := allreduce.AllGather(ctx, h.g, all, descriptor(h.st, h.joiner, hd)); err != nil {
		return nil, nil, fmt.Errorf("heal: exchanging identities: %w", err)
	}
	desc := make([][]int64, n)
	for r := range desc {
		desc[r] = all[r*descWords : (r+1)*descWords]
	}
	return hb, desc, judge(desc, isJoiner)
}

// healer is one rank's part in Heal.
type healer[T Float] struct {
	cfg              config
	g                *allreduce.Group
	st               *State[T]
	joiner           bool
	senders, joiners []int
	hdr              header
	// in is where a joiner receives: parameters into st.Params, the
	// optimizer's buffers and RNG into fresh slices, moved into st once
	// the verdict is good.
	in       State[T]
	failure  failure // this rank's first failure in step 3
	sentByMe int64
}

func (h *healer[T]) run(ctx context.Context, isJoiner []bool) ([]int64, error) {
	// Step 1: identity.
	hb, desc, err := h.identify(ctx, isJoiner)
	if err != nil {
		return nil, err
	}
	// Step 2: the header, checked against the first sender's digest.
	var want [4]int64
	copy(want[:], desc[h.senders[0]][dHeader:dHeader+4])
	if err := h.header(ctx, hb, want); err != nil {
		return nil, err
	}
	// Step 3: the stripes.
	if len(h.joiners) > 0 {
		if err := h.stripes(ctx); err != nil {
			return nil, err
		}
	}
	// Step 4: the verdict and the replica check.
	return h.verdict(ctx)
}

// header is step 2: the first sender's header to every rank, checked by the
// joiners, and their status gathered.
func (h *healer[T]) header(ctx context.Context, hb []byte, digest [4]int64) error {
	first := h.senders[0]
	size := []int64{int64(len(hb))}
	if err := allreduce.Broadcast(ctx, h.g, size, first); err != nil {
		return fmt.Errorf("heal: receiving the state's header from rank %d: %w", first, err)
	}
	var bad error
	if size[0] < 0 || size[0] > maxHeaderBytes {
		// Every rank sees the same size: they all stop here.
		return fmt.Errorf("heal: rank %d's state header is %d bytes (limit %d)", first, size[0], maxHeaderBytes)
	}
	buf := make([]int64, (size[0]+7)/8)
	if h.g.Rank() == first {
		copy(bytesOf(buf), hb)
		h.sentByMe += int64(8 + 8*len(buf))
	}
	if err := allreduce.Broadcast(ctx, h.g, buf, first); err != nil {
		return fmt.Errorf("heal: receiving the state's header from rank %d: %w", first, err)
	}
	if h.joiner {
		got := bytesOf(buf)[:size[0]]
		if digestOf(got) != digest {
			bad = fmt.Errorf("heal: the state's header from rank %d does not match its digest", first)
		}
		if bad == nil {
			h.hdr, bad = decodeHeader(got, len(h.st.Params), kindOf(h.st.Optim.Optimizer, h.st.Optim.DType))
		}
		if bad == nil && h.hdr.ParamsHeld != h.st.ParamsHeld {
			bad = fmt.Errorf("heal: the senders' stream %s, this rank's %s (State.ParamsHeld)", inOut(!h.hdr.ParamsHeld), inOut(!h.st.ParamsHeld))
		}
	}
	return h.agree(ctx, bad, "checking the state's header")
}

// agree all-gathers whether every rank is fine (bad == nil) and returns the
// first rank's failure, the same on every rank: its own text on the rank
// that failed, its rank elsewhere.
func (h *healer[T]) agree(ctx context.Context, bad error, what string) error {
	n := h.g.Size()
	all := make([]int64, n)
	mine := []int64{0}
	if bad != nil {
		mine[0] = 1
	}
	if err := allreduce.AllGather(ctx, h.g, all, mine); err != nil {
		return fmt.Errorf("heal: %s: %w", what, err)
	}
	for r, v := range all {
		if v == 0 {
			continue
		}
		if r == h.g.Rank() {
			return bad
		}
		return fmt.Errorf("heal: rank %d failed %s: refused, nothing was loaded", r, what)
	}
	return nil
}

// inOut words whether the parameters are in the stream.
func inOut(in bool) string {
	if in {
		return "carries the parameters"
	}
	return "leaves the parameters out"
}

// streamLen is the stream's length in bytes, from the header.
func (h *healer[T]) streamLen() int {
	b := len(h.hdr.Buffers) * h.hdr.Len * 8
	if !h.hdr.ParamsHeld {
		b += len(bytesOf(h.st.Params))
	}
	return b + h.hdr.RNG
}

// sectionsIn are the sections a joiner receives into (allocated from the
// header; parameters apart, unless held).
func (h *healer[T]) sectionsIn() [][]byte {
	h.in.ParamsHeld = h.hdr.ParamsHeld
	if !h.in.ParamsHeld {
		h.in.Params = make([]T, len(h.st.Params))
	}
	h.in.Optim = optim.State{Optimizer: h.hdr.Optimizer, DType: h.hdr.DType, Step: h.hdr.Step, Len: h.hdr.Len}
	for _, x := range h.hdr.Hyper {
		h.in.Optim.Hyper = append(h.in.Optim.Hyper, optim.Hyper{Name: x.Name, Value: math.Float64frombits(x.Bits)})
	}
	for _, name := range h.hdr.Buffers {
		h.in.Optim.Buffers = append(h.in.Optim.Buffers, optim.Buffer{Name: name, Data: make([]float64, h.hdr.Len)})
	}
	h.in.RNG = make([]byte, h.hdr.RNG)
	h.in.Position = h.hdr.Position
	h.in.LossSum = math.Float64frombits(h.hdr.LossBits)
	return sections(&h.in)
}

// WithSegment makes Heal move at most n words (8 bytes each) per
// Broadcast (default 1 Mi words, 8 MiB): the scratch each rank holds.
func WithSegment(n int) Option {
	return func(c *config) { c.segment = max(1, n) }
}
