package mpconn

import (
	"context"
	"fmt"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/lifecycle"
	"github.com/ringddp/ringddp/allreduce/internal/selflink"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Core is the part of a multi-process endpoint that every call goes
// through first: which link a peer's messages take (none, the self link,
// for the endpoint's own rank), whether the endpoint is still open, and
// whether a length is allowed. L is the transport's link type, a pointer.
type Core[L comparable] struct {
	Name       string // the transport, the prefix of its errors ("tcp")
	Rank, Size int
	MaxMessage int64
	// Links holds the link to each peer, by rank: the zero L at Rank
	// (and for peers not connected yet, while Dial runs).
	Links []L
	// Usable, if not nil, says why a link can take no more calls (nil
	// while it can).
	Usable func(L) error
	End    *lifecycle.End // Close, Abort
	Self   *selflink.Link // this rank's messages to itself
}

// NewCore is the core of rank's endpoint in a world of size ranks: its
// calls time out after timeout, and its self link hands a sink pieces of
// piece bytes.
func NewCore[L comparable](name string, rank, size int, maxMessage int64, timeout time.Duration, piece int) Core[L] {
	end := lifecycle.New(name, rank)
	return Core[L]{
		Name:       name,
		Rank:       rank,
		Size:       size,
		MaxMessage: maxMessage,
		Links:      make([]L, size),
		End:        end,
		Self:       selflink.New(selflink.Owner{Rank: rank, Timeout: timeout, Dead: end.Dead(), DeadErr: end.Err, Piece: piece}),
	}
}

// Link returns the link to peer, or the zero L for this rank itself.
func (c *Core[L]) Link(peer int) (L, error) {
	var self L
	if peer < 0 || peer >= c.Size {
		return self, fmt.Errorf("%s rank %d: peer %d: %w (world size %d)", c.Name, c.Rank, peer, transport.ErrInvalid, c.Size)
	}
	if c.End.Ended() {
		return self, c.End.Err()
	}
	if peer == c.Rank {
		return self, nil
	}
	l := c.Links[peer]
	if c.Usable != nil {
		if err := c.Usable(l); err != nil {
			return self, err
		}
	}
	return l, nil
}

// CheckLen fails a message of n bytes: negative, or over MaxMessage.
func (c *Core[L]) CheckLen(n int) error {
	if n < 0 || int64(n) > c.MaxMessage {
		return fmt.Errorf("%s rank %d: message of %d bytes: %w (MaxMessage is %d)", c.Name, c.Rank, n, transport.ErrInvalid, c.MaxMessage)
	}
	return nil
}

// SendLink checks a Send of n bytes to rank to (the link, the length,
// then ctx) and returns its link: the zero L to this rank itself, which
// SendSelf serves.
func (c *Core[L]) SendLink(ctx context.Context, to, n int) (L, error) {
	return c.oneLink(ctx, to, n)
}

// RecvLink checks a Recv of n bytes from rank from as SendLink does a
// Send; the zero L is this rank itself, which Self.Recv serves.
func (c *Core[L]) RecvLink(ctx context.Context, from, n int) (L, error) {
	return c.oneLink(ctx, from, n)
}

func (c *Core[L]) oneLink(ctx context.Context, peer, n int) (L, error) {
	l, err := c.Link(peer)
	if err == nil {
		err = c.CheckLen(n)
	}
	if err == nil {
		err = ctx.Err()
	}
	return l, err
}

// ExchangeLinks checks an Exchange that sends sn bytes to rank to and
// receives rn bytes from rank from: both links, both lengths, then ctx.
func (c *Core[L]) ExchangeLinks(ctx context.Context, to, sn, from, rn int) (lt, lf L, err error) {
	if lt, err = c.Link(to); err != nil {
		return lt, lf, err
	}
	if lf, err = c.Link(from); err != nil {
		return lt, lf, err
	}
	if err = c.CheckLen(sn); err == nil {
		if err = c.CheckLen(rn); err == nil {
			err = ctx.Err()
		}
	}
	return lt, lf, err
}

// SendSelf sends p to this rank itself under h, and waits until this
// rank's receive is done with it.
func (c *Core[L]) SendSelf(ctx context.Context, h transport.Header, p []byte) error {
	c.Self.Post(h, p)
	return c.Self.WaitSend(ctx)
}
