package allreduce

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Stalls: how a rank that gives up waiting names the rank at fault.
//
// In a hang every rank waits for some other: in a ring, when rank 1
// stops, rank 2 waits for rank 1, rank 3 for rank 2, rank 0 for rank 3.
// Each gives up when its own wait passes the transport's timeout, and the
// first to give up need not be rank 2. So a rank that gives up first sends
// every peer a stall notice (transport.Stall: whom it waited for, in which
// call) without failing anything, listens for its peers' notices for a
// short grace, and only then fails, naming the end of the chain of waits:
// the rank that gave no notice, which never completed the call. A rank
// whose call fails because a peer gave up (the peer's abort) follows the
// notices it holds the same way, from that peer. The wait is bounded:
// stallGrace after a timeout.
//
// Transports carry notices through the optional stallNotifier; without
// it a rank names the peer it waited for, as before.

// stallNotifier is the optional capability of a transport that tells
// every peer, without failing anything, that this rank gave up waiting
// (NoteStall), and keeps the notices its peers sent, and its own
// (PeerStall). The inproc, tcp, shm and mixed transports have it.
type stallNotifier interface {
	NoteStall(s transport.Stall)
	PeerStall(rank int) (transport.Stall, bool)
}

// maxStallGrace bounds how long a rank that timed out listens for its
// peers' stall notices before it fails: the ranks of a chain give up
// within milliseconds of one another, so a quarter of the timeout, at
// most half a second, hears them.
const maxStallGrace = 500 * time.Millisecond

func stallGrace(timeout time.Duration) time.Duration { return min(timeout/4, maxStallGrace) }

// StalledError is a collective that failed because ranks stopped making
// progress. Waits is the chain of waits this rank followed through the
// stall notices: Waits[0] is the first rank it knows gave up, each wait's
// Peer is the next one's Rank, and Missing is the rank the last wait was
// for, which gave no notice: it never completed that call (stopped, hung,
// or never called it). Missing is -1 when the waits close a cycle. Err is
// the failure as this rank saw it; errors.Is finds transport.ErrTimeout
// or transport.ErrPeer through it.
type StalledError struct {
	Rank    int               // this rank
	Waits   []transport.Stall // who waited for whom, ending at Missing
	Missing int
	Err     error
}

func (e *StalledError) Error() string {
	var b strings.Builder
	last := e.Waits[len(e.Waits)-1]
	if e.Missing < 0 {
		ranks := make([]string, len(e.Waits))
		for i, w := range e.Waits {
			ranks[i] = fmt.Sprint(w.Rank)
		}
		fmt.Fprintf(&b, "ranks %s waited for one another in a cycle in %s", strings.Join(ranks, ", "), describeHeader(last.Call))
	} else {
		who := fmt.Sprintf("rank %d", e.Missing)
		if e.Missing == e.Rank {
			who = fmt.Sprintf("this rank (%d)", e.Missing)
		}
		fmt.Fprintf(&b, "%s never completed %s: rank %d waited %v %s", who, describeHeader(last.Call), last.Rank, last.After, waitedFor(last.What))
		for i := len(e.Waits) - 2; i >= 0; i-- {
			w := e.Waits[i]
			fmt.Fprintf(&b, ", rank %d waited %v for rank %d", w.Rank, w.After, w.Peer)
		}
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

// waitedFor says what a rank waited for, given a notice's What.
func waitedFor(what string) string {
	switch what {
	case "send":
		return "for it to take a message"
	case "recv":
		return "for its message"
	case "expose":
		return "for it to lend its buffer"
	case "exchange":
		return "to exchange messages with it"
	}
	return "for it at a barrier"
}

// SilentRanks is the rank that never completed the call, if the waits
// end at one: a transport that aborts need not wait for its answer.
func (e *StalledError) SilentRanks() []int {
	if e.Missing < 0 {
		return nil
	}
	return []int{e.Missing}
}

// Unwrap is the failure as this rank saw it.
func (e *StalledError) Unwrap() error { return e.Err }

// blameStall turns err, the failure of the call with header call, into a
// *StalledError when it is a stall: this rank's own timeout (it then
// notes its stall, listens for stallGrace, and follows the notices from
// itself) or a peer's failure when that peer left a notice (followed from
// the peer). Any other error, or a transport without notices, is
// returned as it is.
func (g *Group) blameStall(ctx context.Context, call transport.Header, err error) error {
	notes, ok := g.conn.(stallNotifier)
	if !ok {
		return err
	}
	var first transport.Stall
	var pe *transport.PeerError
	var te *transport.TimeoutError
	switch {
	case errors.As(err, &pe):
		if first, ok = notes.PeerStall(pe.Peer); !ok {
			return err
		}
	case errors.As(err, &te):
		after, perr := time.ParseDuration(te.After)
		first = transport.Stall{Rank: g.worldRank, Peer: te.Peer, What: te.What, After: after, Call: call}
		// A wait on this rank itself (its self link) or on nobody in
		// particular is no chain to follow.
		if perr != nil || te.Peer < 0 || te.Peer == g.worldRank || transport.StallWhatCode(te.What) == 0 {
			return err
		}
		notes.NoteStall(first)
		t := time.NewTimer(stallGrace(after))
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	default:
		return err
	}
	waits, missing := followStalls(first, notes)
	return &StalledError{Rank: g.worldRank, Waits: waits, Missing: missing, Err: err}
}

// followStalls follows the notices from first: to the rank first waited
// for, that rank's notice, and so on, until a rank without one (missing)
// or a rank met before (missing -1: a cycle).
func followStalls(first transport.Stall, notes stallNotifier) (waits []transport.Stall, missing int) {
	waits = []transport.Stall{first}
	seen := map[int]bool{first.Rank: true}
	for {
		next := waits[len(waits)-1].Peer
		if seen[next] {
			return waits, -1
		}
		s, ok := notes.PeerStall(next)
		if !ok {
			return waits, next
		}
		seen[next] = true
		waits = append(waits, s)
	}
}
