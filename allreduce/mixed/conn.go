package mixed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/lifecycle"
	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Endpoint is what Conn needs of each of its endpoints (*tcp.Conn and
// *shm.Conn are).
type Endpoint interface {
	transport.Conn
	transport.Exchanger
	transport.Aborter
}

// Conn is one rank's endpoint of a job that spans hosts: messages to the
// ranks of this host go through the local endpoint (shared memory), the
// others through the world endpoint (tcp). It implements transport.Conn,
// transport.Exchanger and transport.Aborter; NodeName, LocalRank and
// LocalSize place it.
type Conn struct {
	rank, size int
	node       string
	world      Endpoint // every rank, by world rank
	local      Endpoint // this host's ranks, by local rank; nil when alone on the host
	members    []int    // local rank -> world rank
	toLocal    []int    // world rank -> local rank, -1 for ranks on other hosts
	localRank  int
	end        *lifecycle.End
}

var (
	_ transport.Conn      = (*Conn)(nil)
	_ transport.Exchanger = (*Conn)(nil)
	_ transport.Aborter   = (*Conn)(nil)
)

// New composes world, this rank's endpoint of every rank, and local, its
// endpoint of the ranks of its host, whose local rank i is world rank
// members[i] (members in increasing order, this rank among them); local
// is nil when members holds this rank alone. node names the host.
func New(world, local Endpoint, members []int, node string) (*Conn, error) {
	rank, size := world.Rank(), world.Size()
	c := &Conn{rank: rank, size: size, node: node, world: world, members: members, localRank: -1, end: lifecycle.New("mixed", rank)}
	for i, w := range members {
		switch {
		case w < 0 || w >= size || (i > 0 && w <= members[i-1]):
			return nil, fmt.Errorf("mixed: %w: host members %v of a world of %d (want increasing ranks)", transport.ErrInvalid, members, size)
		case w == rank:
			c.localRank = i
		}
	}
	if c.localRank < 0 {
		return nil, fmt.Errorf("mixed: %w: rank %d is not among its host's members %v", transport.ErrInvalid, rank, members)
	}
	if len(members) > 1 {
		if local == nil || local.Size() != len(members) || local.Rank() != c.localRank {
			return nil, fmt.Errorf("mixed: %w: the local endpoint is not rank %d of %d", transport.ErrInvalid, c.localRank, len(members))
		}
		c.local = local
		c.toLocal = make([]int, size)
		for r := range c.toLocal {
			c.toLocal[r] = -1
		}
		for i, w := range members {
			c.toLocal[w] = i
		}
	} else if local != nil {
		return nil, fmt.Errorf("mixed: %w: a local endpoint for a host of one rank", transport.ErrInvalid)
	}
	return c, nil
}

// Rank is this endpoint's world rank.
func (c *Conn) Rank() int { return c.rank }

// Size is the number of ranks in the world.
func (c *Conn) Size() int { return c.size }

// NodeName names this rank's host.
func (c *Conn) NodeName() string { return c.node }

// LocalRank is this rank's index among its host's ranks.
func (c *Conn) LocalRank() int { return c.localRank }

// LocalSize is the number of ranks on this host.
func (c *Conn) LocalSize() int { return len(c.members) }

// Members are the world ranks on this host, in order (do not modify).
func (c *Conn) Members() []int { return c.members }

// World is the endpoint of every rank (tcp).
func (c *Conn) World() Endpoint { return c.world }

// LocalEndpointMembers lists the world ranks whose messages go through
// the local endpoint, apart from the world endpoint's: this host's ranks,
// nil when this rank is alone on its host. The two endpoints run one call
// each at once (package allreduce pipelines its topology-aware
// algorithms' intra-host and inter-host stages on them).
func (c *Conn) LocalEndpointMembers() []int {
	if c.local == nil {
		return nil
	}
	return c.members
}

// Local is the endpoint of this host's ranks (shm), nil when this rank
// is alone on its host.
func (c *Conn) Local() Endpoint { return c.local }

// route is the endpoint that carries messages with peer, and peer's rank
// there. Out-of-range peers go to the world endpoint, which refuses them.
func (c *Conn) route(peer int) (Endpoint, int, bool) {
	if c.local != nil && peer >= 0 && peer < c.size {
		if l := c.toLocal[peer]; l >= 0 {
			return c.local, l, true
		}
	}
	return c.world, peer, false
}

// Send sends p to rank to through the endpoint that carries the pair.
func (c *Conn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	if c.end.Ended() {
		return c.end.Err()
	}
	e, q, loc := c.route(to)
	return c.result(e.Send(ctx, q, h, p), loc)
}

// Recv receives the next message from rank from through the endpoint
// that carries the pair.
func (c *Conn) Recv(ctx context.Context, from int, h transport.Header, n int, sink transport.Sink) error {
	if c.end.Ended() {
		return c.end.Err()
	}
	e, q, loc := c.route(from)
	return c.result(e.Recv(ctx, q, h, n, sink), loc)
}

// sendGrace is how long an Exchange whose receive failed still waits for
// its send on the other endpoint before cancelling it: long enough for a
// send that is merely finishing (a frame cut short would cost the peer
// the abort that tells it why), short enough that a send blocked on a
// peer that waits for this rank does not hold the failure back.
const sendGrace = time.Second

// Exchange sends sp to rank to while receiving from rank from. When one
// endpoint carries both, it is that endpoint's Exchange; otherwise the
// send runs on a second goroutine, so neither half waits for the other.
func (c *Conn) Exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	if c.end.Ended() {
		return c.end.Err()
	}
	et, qt, lt := c.route(to)
	ef, qf, lf := c.route(from)
	if lt == lf {
		return c.result(et.Exchange(ctx, qt, sh, sp, qf, rh, n, sink), lt)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := make(chan error, 1)
	go func() { sent <- et.Send(sctx, qt, sh, sp) }()
	rerr := c.result(ef.Recv(ctx, qf, rh, n, sink), lf)
	var serr error
	if rerr == nil {
		serr = <-sent
	} else {
		t := time.NewTimer(sendGrace)
		select {
		case serr = <-sent:
		case <-t.C:
			cancel()
			serr = <-sent
		}
		t.Stop()
	}
	if rerr != nil {
		return rerr
	}
	return c.result(serr, lt)
}

// Close closes both endpoints: pending and later calls fail with
// transport.ErrClosed; peers see a *transport.PeerError for this rank.
func (c *Conn) Close() error {
	c.end.Finish(transport.ErrClosed, nil, func() {
		if c.local != nil {
			_ = c.local.Close()
		}
		_ = c.world.Close()
	})
	return nil
}

// Abort aborts both endpoints with cause: peers on this host and on
// others fail with a *transport.PeerError carrying it.
func (c *Conn) Abort(cause error) {
	cause = lifecycle.AbortCause(cause)
	c.end.Finish(cause, nil, func() {
		if c.local != nil {
			c.local.Abort(cause)
		}
		c.world.Abort(cause)
	})
}

// result is what a call on an endpoint returns to the caller: the
// composite's own error once it has ended (the endpoint's would name its
// local rank), else err with the local endpoint's ranks made world ranks.
func (c *Conn) result(err error, local bool) error {
	if err == nil {
		return nil
	}
	if c.end.Ended() && (errors.Is(err, transport.ErrClosed) || !errors.Is(err, transport.ErrPeer)) {
		return c.end.Err()
	}
	if local {
		return c.worldErr(err)
	}
	return err
}

// worldRank is local rank l's world rank (l itself if out of range: it
// came from a peer's memory and was checked there, but never trust it).
func (c *Conn) worldRank(l int) int {
	if l >= 0 && l < len(c.members) {
		return c.members[l]
	}
	return l
}

// worldErr renames the local ranks of the errors the shm endpoint
// returns — *transport.PeerError (and the *AbortError it may carry),
// *transport.MismatchError, *transport.TimeoutError — to world ranks.
// A mismatch record inside an abort already names world ranks: the
// aborting rank's composite renamed it before it aborted.
func (c *Conn) worldErr(err error) error {
	switch e := err.(type) {
	case *transport.PeerError:
		pe := &transport.PeerError{Peer: c.worldRank(e.Peer), Err: e.Err}
		var ae *mpconn.AbortError
		if errors.As(e.Err, &ae) && ae == e.Err {
			cp := *ae
			cp.Rank = c.worldRank(ae.Rank)
			pe.Err = &cp
		}
		return pe
	case *transport.MismatchError:
		cp := *e
		cp.Rank, cp.Peer = c.worldRank(e.Rank), c.worldRank(e.Peer)
		return &cp
	case *transport.TimeoutError:
		cp := *e
		cp.Peer = c.worldRank(e.Peer)
		return &cp
	}
	return err
}
