package allreduce

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Kind names a collective on the wire.
type Kind uint8

// The collectives.
const (
	KindAllReduce Kind = iota + 1
	KindReduceScatter
	KindAllGather
	KindBroadcast
	KindReduce
	KindBarrier
	KindShift // not scheduled: one exchange (shift.go)
)

func (k Kind) String() string {
	switch k {
	case KindAllReduce:
		return "AllReduce"
	case KindReduceScatter:
		return "ReduceScatter"
	case KindAllGather:
		return "AllGather"
	case KindBroadcast:
		return "Broadcast"
	case KindReduce:
		return "Reduce"
	case KindBarrier:
		return "Barrier"
	case KindShift:
		return "Shift"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ErrGroupFailed wraps the cause returned by every call on a Group after a
// collective on it failed.
var ErrGroupFailed = errors.New("allreduce: group failed earlier")

// ErrInvalid reports misuse on this rank (nil or wrongly sized buffer, root
// out of range, Avg on integers, ...), found before any communication.
var ErrInvalid = errors.New("allreduce: invalid call")

// call is one collective as issued by the caller.
type call struct {
	kind  Kind
	dt    DType
	op    ReduceOp
	root  int
	count int    // elements of the whole collective (buf, or src for ReduceScatter, dst for AllGather)
	buf   []byte // AllReduce, Broadcast, Reduce: in/out; ReduceScatter, AllGather: dst
	src   []byte // ReduceScatter, AllGather: input
	// layout is the chunk of each rank for ReduceScatterV and AllGatherV;
	// nil means ChunkBounds.
	layout []Chunk
	// finals, when set, is told the parts of buf that become final
	// (AllReduceRanges, rangedone.go).
	finals *finals
}

// header is the header of this call's messages on the group with the
// given id.
func (c *call) header(group uint32, seq uint64) transport.Header {
	return transport.Header{
		Group: group,
		Seq:   seq,
		Kind:  uint8(c.kind),
		DType: uint8(c.dt),
		Op:    uint8(c.op),
		Root:  int32(c.root),
		Count: int64(c.count),
	}
}

// describe renders a call as it appears in error messages: its sequence
// number, kind, element type and count, and its op and root where it has
// them (describeHeader, DescribeCall).
func describe(seq uint64, kind Kind, dt DType, op ReduceOp, root int, count int64) string {
	s := fmt.Sprintf("#%d %v(%v × %d", seq, kind, dt, count)
	switch kind {
	case KindAllReduce, KindReduceScatter:
		s += ", " + op.String()
	case KindReduce:
		s += fmt.Sprintf(", %v, root %d", op, root)
	case KindBroadcast:
		s += fmt.Sprintf(", root %d", root)
	case KindBarrier:
		s = fmt.Sprintf("#%d Barrier(", seq)
	case KindShift:
		s += fmt.Sprintf(", by %d", root)
	}
	return s + ")"
}

// describeHeader is describe of the call a message header belongs to,
// with its sub-group and the schedule its agreement message says.
func describeHeader(h transport.Header) string {
	s := describe(h.Seq, Kind(h.Kind), DType(h.DType), ReduceOp(h.Op), int(h.Root), h.Count)
	if h.Group != 0 {
		s += fmt.Sprintf(" on group %#x", h.Group)
	}
	if k := Kind(h.Kind); k == KindBroadcast || k == KindReduce {
		switch h.Step { // the agreement message says the schedule (agree.go)
		case agreeStep:
			s += " by binomial tree"
		case agreeChainStep:
			s += " by chain"
		}
	}
	return s
}

// DescribeCall renders the collective a message header belongs to as
// errors name it: "#3 AllReduce(float32 × 1000, Sum)".
func DescribeCall(h transport.Header) string { return describeHeader(h) }

// callError gives err the context of the call it ended. A mismatch that
// involves this rank's call is spelled out as the two calls that disagree,
// this rank's first, whether this rank found it or learnt it from the
// peer that did (the peer's abort cause). A mismatch between two other
// ranks, relayed inside a peer's abort cause, is never reported as this
// rank's own: the error names this rank's call, then the two calls that
// disagree, the rank that found it and the ranks that relayed it here.
func callError(rank int, call transport.Header, err error) error {
	var mm *transport.MismatchError
	if errors.As(err, &mm) {
		via := relays(err)
		if own, ok := mm.From(rank); ok {
			mine := describeHeader(own.Local)
			if own.Local.Group != call.Group {
				// The mismatch met a collective this call runs inside
				// itself (Auto learning the topology, a composition's
				// sub-group): the user's call comes first.
				mine = describeHeader(call) + ", in its " + mine
			}
			found := ""
			if mm.Rank != rank {
				found = fmt.Sprintf(" (found by rank %d%s)", mm.Rank, viaText(via, mm.Rank))
			}
			return fmt.Errorf("allreduce: rank %d called %s (message of %d bytes) but rank %d called %s (message of %d bytes)%s: %w",
				rank, mine, own.LocalBytes, own.Peer, describeHeader(own.Remote), own.RemoteBytes, found, err)
		}
		return fmt.Errorf("allreduce: rank %d, %s: rank %d called %s but rank %d called %s (found by rank %d%s): %w",
			rank, describeHeader(call),
			mm.Rank, describeHeader(mm.Local), mm.Peer, describeHeader(mm.Remote), mm.Rank, viaText(via, mm.Rank), err)
	}
	var se *StalledError
	if errors.As(err, &se) && se.Missing >= 0 && sameCall(se.Waits[len(se.Waits)-1].Call, call) {
		return fmt.Errorf("allreduce: rank %d: %w", rank, err) // the stall names the call
	}
	return fmt.Errorf("allreduce: rank %d, %s: %w", rank, describeHeader(call), err)
}

// sameCall reports whether two headers are of the same collective (any
// message of it).
func sameCall(a, b transport.Header) bool {
	a.Step, b.Step = 0, 0
	return a == b
}

// relays lists the ranks whose failures err passed through, outermost
// first: the Peer of each *transport.PeerError on the way down the chain
// to the first *transport.MismatchError.
func relays(err error) []int {
	var out []int
	for err != nil {
		if _, ok := err.(*transport.MismatchError); ok {
			return out
		}
		if pe, ok := err.(*transport.PeerError); ok {
			out = append(out, pe.Peer)
			err = pe.Err
			continue
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			var next error
			for _, e := range u.Unwrap() {
				var mm *transport.MismatchError
				if errors.As(e, &mm) {
					next = e
					break
				}
			}
			err = next
		default:
			return out
		}
	}
	return out
}

// viaText is ", relayed by rank 2, rank 1" for the ranks of via other than
// the finder, or "".
func viaText(via []int, finder int) string {
	s := ""
	for _, r := range via {
		if r == finder {
			continue
		}
		if s == "" {
			s = ", relayed by rank " + strconv.Itoa(r)
		} else {
			s += ", rank " + strconv.Itoa(r)
		}
	}
	return s
}

// validate checks the call on this rank before any communication.
func (c *call) validate(size int) error {
	if c.kind == KindBarrier {
		return nil
	}
	if c.dt.Size() == 0 {
		return fmt.Errorf("%w: unsupported dtype %v", ErrInvalid, c.dt)
	}
	switch c.kind {
	case KindAllReduce, KindReduceScatter, KindReduce:
		if !c.op.valid() {
			return fmt.Errorf("%w: unknown reduce op %d", ErrInvalid, uint8(c.op))
		}
		if c.op == Avg && !c.dt.IsFloat() {
			return fmt.Errorf("%w: Avg on integer dtype %v (use Sum and divide)", ErrInvalid, c.dt)
		}
	}
	if c.layout != nil {
		if len(c.layout) != size {
			return fmt.Errorf("%w: %d chunk counts for %d ranks", ErrInvalid, len(c.layout), size)
		}
		if c.layout[size-1].Hi != c.count {
			return fmt.Errorf("%w: chunk counts add up to %d, buffer has %d elements", ErrInvalid, c.layout[size-1].Hi, c.count)
		}
	}
	switch c.kind {
	case KindBroadcast, KindReduce:
		if c.root < 0 || c.root >= size {
			return fmt.Errorf("%w: root %d out of range for %d ranks", ErrInvalid, c.root, size)
		}
	case KindShift:
		if c.root < 0 || c.root >= size {
			return fmt.Errorf("%w: Shift by %d ranks out of range for %d ranks (want 0 to %d)", ErrInvalid, c.root, size, size-1)
		}
		if c.layout == nil {
			return fmt.Errorf("%w: Shift without counts", ErrInvalid)
		}
	}
	return nil
}

// CollectiveBytes is the bytes per rank of the collective a message with
// header h belongs to (its Count elements of its DType): what
// cost.Model.CacheWork is keyed on, and what the simulator needs to key
// its own alike (sim.Config.CollectiveBytes).
func CollectiveBytes(h transport.Header) int { return int(h.Count) * elemSize(h) }
