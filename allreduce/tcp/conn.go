package tcp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/lifecycle"
	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
	"github.com/ringddp/ringddp/allreduce/internal/stallnotes"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Conn is one rank's endpoint of a TCP mesh: one connection to each other
// rank. It implements transport.Conn, transport.Exchanger,
// transport.Aborter; LocalRank and LocalSize say where it runs.
type Conn struct {
	cfg                  Config
	rank, size           int
	localRank, localSize int
	// core: the links by peer (nil at this rank), the self link, the
	// checks of every call; its End is ended by Close, Abort or a failed
	// Dial.
	core mpconn.Core[*link]

	stalls     *stallnotes.Register // the stall notices peers sent
	ready      atomic.Bool          // Dial has returned the Conn
	setupFails chan error           // why links failed while Dial was running
}

var (
	_ transport.Conn      = (*Conn)(nil)
	_ transport.Exchanger = (*Conn)(nil)
	_ transport.Aborter   = (*Conn)(nil)
)

func newConn(cfg Config) *Conn {
	c := &Conn{
		cfg:        cfg,
		rank:       cfg.Rank,
		size:       cfg.Size,
		core:       mpconn.NewCore[*link]("tcp", cfg.Rank, cfg.Size, cfg.MaxMessage, cfg.Timeout, pieceSize),
		setupFails: make(chan error, cfg.Size),
		stalls:     stallnotes.New(cfg.Size),
	}
	c.core.Usable = (*link).usable
	return c
}

// Rank is this endpoint's rank.
func (c *Conn) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Conn) Size() int { return c.size }

// NodeName names this rank's node for topology-aware algorithms
// (Config.Node: the host name unless set).
func (c *Conn) NodeName() string { return c.cfg.Node }

// WireProtection is what protects this endpoint's frames (the
// configured mode, defaults applied).
func (c *Conn) WireProtection() WireProtection { return c.cfg.WireProtection }

// LocalRank is this rank's index among the ranks on its host.
func (c *Conn) LocalRank() int { return c.localRank }

// LocalSize is the number of ranks on this host.
func (c *Conn) LocalSize() int { return c.localSize }

func (c *Conn) linkFailed(l *link) {
	if !c.ready.Load() {
		select {
		case c.setupFails <- fmt.Errorf("rank %d failed while the mesh was forming: %w", l.peer, l.err()):
		default:
		}
	}
}

// usable says why l can take no more calls: it failed.
func (l *link) usable() error {
	select {
	case <-l.failed:
		return l.err()
	default:
		return nil
	}
}

// Send writes p to rank to under h and returns once p is on its way (in
// the socket), not once the peer has received it.
func (c *Conn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	l, err := c.core.SendLink(ctx, to, len(p))
	if err != nil {
		return err
	}
	if l == nil {
		return c.core.SendSelf(ctx, h, p)
	}
	if len(p) <= directWriteMax {
		return l.sendErr(ctx, l.writeData(h, p))
	}
	l.startSend(h, p)
	return l.waitSend(ctx)
}

// directWriteMax is the largest payload written on the caller's goroutine
// instead of the link's writer: one write of at most 4 KiB plus the header
// always fits the socket buffers, so it cannot block on a peer that is
// itself writing, and it saves a goroutine hand-off per message.
const directWriteMax = 4 << 10

// Recv reads the next message from rank from, which must carry h and n
// bytes, into sink in pieces of at most 256 KiB.
func (c *Conn) Recv(ctx context.Context, from int, h transport.Header, n int, sink transport.Sink) error {
	l, err := c.core.RecvLink(ctx, from, n)
	if err != nil {
		return err
	}
	if l == nil {
		return c.core.Self.Recv(ctx, h, n, sink)
	}
	return l.recv(ctx, h, n, sink)
}

// Exchange sends sp to rank to (on the link's writer goroutine) while
// receiving from rank from (on the caller's), and waits for both.
func (c *Conn) Exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	lt, lf, err := c.core.ExchangeLinks(ctx, to, len(sp), from, n)
	if err != nil {
		return err
	}
	if lf != nil {
		lf.poll.expect(n) // wake its reader while we write
	}
	var rerr, serr error
	direct := lt != nil && len(sp) <= directWriteMax
	switch {
	case lt == nil:
		c.core.Self.Post(sh, sp)
	case direct:
		serr = lt.sendErr(ctx, lt.writeData(sh, sp))
	default:
		lt.startSend(sh, sp)
	}
	if lf == nil {
		rerr = c.core.Self.Recv(ctx, rh, n, sink)
	} else {
		rerr = lf.recv(ctx, rh, n, sink)
	}
	// Even after a failed receive, let the send finish (the peer is
	// reading, or fails, or the deadline passes): a frame cut short would
	// cost the peer the abort frame that tells it why this rank failed.
	switch {
	case lt == nil:
		serr = c.core.Self.WaitSend(ctx)
	case !direct:
		serr = lt.waitSend(ctx)
	}
	if rerr != nil {
		return rerr
	}
	return serr
}

// Close ends this endpoint: pending and later calls fail with
// transport.ErrClosed, and each peer is told with a goodbye frame (it sees
// a *transport.PeerError for this rank). It returns once every peer has
// acknowledged, or after a second.
func (c *Conn) Close() error {
	c.shutdown(transport.ErrClosed)
	return nil
}

// Abort marks this rank failed with cause: every peer gets an abort frame
// with the cause's text (its calls involving this rank fail with a
// *transport.PeerError carrying an *AbortError), and this endpoint closes.
// It returns once every peer has acknowledged, or after a second.
func (c *Conn) Abort(cause error) { c.shutdown(lifecycle.AbortCause(cause)) }

func (c *Conn) shutdown(cause error) {
	c.core.End.Finish(cause, nil, func() {
		typ, flags := byte(typeGoodbye), byte(0)
		var text []byte
		if !errors.Is(cause, transport.ErrClosed) {
			typ = typeAbort
			flags, text = abortPayload(cause)
		}
		for _, l := range c.core.Links {
			if l != nil {
				l.shutdown(typ, flags, text)
			}
		}
		// Wait (briefly) for every peer to acknowledge by closing its side,
		// which it does on reading the frame: then no peer can still take
		// this rank for alive. Not for a peer whose silence is the cause
		// (it timed out: stopped, or hung), which would not answer either.
		silent := silentRanks(cause)
		t := time.NewTimer(ackWait)
		defer t.Stop()
		for _, l := range c.core.Links {
			if l == nil || slices.Contains(silent, l.peer) {
				continue
			}
			select {
			case <-l.rexit:
			case <-t.C:
				return
			}
		}
	})
}

// silenter is an abort cause that names ranks which stopped answering
// (allreduce.StalledError: the rank at the end of a chain of waits).
type silenter interface {
	error
	SilentRanks() []int
}

// silentRanks are the ranks whose silence cause reports: the peer its
// timeout waited for, and the ranks a stall names.
func silentRanks(cause error) []int {
	var out []int
	var te *transport.TimeoutError
	if errors.As(cause, &te) {
		out = append(out, te.Peer)
	}
	var s silenter
	if errors.As(cause, &s) {
		out = append(out, s.SilentRanks()...)
	}
	return out
}

// kill drops every connection without a word, as a crashed process would.
// For tests.
func (c *Conn) kill() {
	c.core.End.Finish(errors.New("killed"), nil, func() {
		for _, l := range c.core.Links {
			if l != nil {
				l.kill()
			}
		}
	})
}
