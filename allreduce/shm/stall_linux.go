package shm

import (
	"sync/atomic"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// NoteStall records s, this rank's stall notice, in its own file's stall
// block, where every peer reads it; only the first notice is kept. It
// fails nothing and wakes nobody: peers read it when they decide whom to
// blame.
func (c *Conn) NoteStall(s transport.Stall) {
	if s.Rank != c.rank || s.Check(c.rank, c.size) != nil || c.own == nil || !c.enter() {
		return
	}
	defer c.leave()
	state := c.own.u32(stallOff)
	if atomic.LoadUint32(state) != 0 {
		return
	}
	encodeStall(c.own.mem[stallOff:stallOff+stallBlockLen], &s)
	atomic.StoreUint32(state, stallNoted)
}

// PeerStall returns the stall notice in rank's stall block (this rank's
// own too), and false if it holds none, cannot be read (the endpoint
// closed) or is corrupt.
func (c *Conn) PeerStall(rank int) (transport.Stall, bool) {
	if rank < 0 || rank >= c.size || c.own == nil || !c.enter() {
		return transport.Stall{}, false
	}
	defer c.leave()
	reg := c.own
	if rank != c.rank {
		l := c.core.Links[rank]
		if l == nil {
			return transport.Stall{}, false
		}
		reg = l.reg
	}
	if atomic.LoadUint32(reg.u32(stallOff)) != stallNoted {
		return transport.Stall{}, false
	}
	var b [stallBlockLen]byte
	copy(b[:], reg.mem[stallOff:])
	s, err := decodeStall(b[:], rank, c.size)
	return s, err == nil
}
