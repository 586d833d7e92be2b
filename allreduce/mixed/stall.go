package mixed

import "github.com/ringddp/ringddp/allreduce/transport"

// staller is the stall-notice capability of an endpoint (*tcp.Conn has
// it): notices go over the world endpoint, which reaches every rank by
// its world rank, this host's too.
type staller interface {
	NoteStall(s transport.Stall)
	PeerStall(rank int) (transport.Stall, bool)
}

// NoteStall tells every rank, through the world endpoint and without
// failing anything, that this rank gave up waiting (s).
func (c *Conn) NoteStall(s transport.Stall) {
	if w, ok := c.world.(staller); ok {
		w.NoteStall(s)
	}
}

// PeerStall returns the last stall notice rank sent, and false if it sent
// none (or the world endpoint carries no notices).
func (c *Conn) PeerStall(rank int) (transport.Stall, bool) {
	if w, ok := c.world.(staller); ok {
		return w.PeerStall(rank)
	}
	return transport.Stall{}, false
}
