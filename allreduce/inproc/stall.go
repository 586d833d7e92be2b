package inproc

import "github.com/ringddp/ringddp/allreduce/transport"

// NoteStall records s, this rank's stall notice, where every rank of the
// world reads it (the ranks share one register). It fails nothing.
func (c *Conn) NoteStall(s transport.Stall) {
	if s.Rank == c.rank && s.Check(c.rank, c.world.size) == nil {
		c.world.stalls.Record(s)
	}
}

// PeerStall returns the last stall notice rank recorded, and false if it
// recorded none.
func (c *Conn) PeerStall(rank int) (transport.Stall, bool) { return c.world.stalls.Peer(rank) }
