//go:build !linux

package shm

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Conn is a shared-memory endpoint; on this system none can be made
// (Dial fails with ErrUnsupported).
type Conn struct{ rank, size int }

// Dial fails: the shared-memory transport needs linux.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	return nil, fmt.Errorf("rank %d: %w (use the tcp transport)", cfg.Rank, ErrUnsupported)
}

func (c *Conn) Rank() int        { return c.rank }
func (c *Conn) Size() int        { return c.size }
func (c *Conn) NodeName() string { return "" }
func (c *Conn) LocalRank() int   { return c.rank }
func (c *Conn) LocalSize() int   { return c.size }
func (c *Conn) Close() error     { return nil }
func (c *Conn) Abort(error)      {}

func (c *Conn) NoteStall(transport.Stall)             {}
func (c *Conn) PeerStall(int) (transport.Stall, bool) { return transport.Stall{}, false }

func (c *Conn) Send(context.Context, int, transport.Header, []byte) error { return ErrUnsupported }
func (c *Conn) Recv(context.Context, int, transport.Header, int, transport.Sink) error {
	return ErrUnsupported
}
func (c *Conn) Exchange(context.Context, int, transport.Header, []byte, int, transport.Header, int, transport.Sink) error {
	return ErrUnsupported
}
