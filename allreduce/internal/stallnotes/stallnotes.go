// Package stallnotes keeps the stall notices a rank's peers sent it
// (transport.Stall), for every transport that carries them.
package stallnotes

import (
	"sync/atomic"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Register holds the stall notice each peer sent, the latest by rank. The
// notices come from reader goroutines and are read by the rank's group
// while it decides whom to blame, so the slots are atomic.
type Register struct {
	by []atomic.Pointer[transport.Stall]
}

// New is an empty register for a world of size ranks.
func New(size int) *Register { return &Register{by: make([]atomic.Pointer[transport.Stall], size)} }

// Record keeps s, a notice that arrived from rank from and passed
// s.Check(from, size).
func (r *Register) Record(s transport.Stall) { r.by[s.Rank].Store(&s) }

// Peer returns the last notice rank sent, and false if it sent none.
func (r *Register) Peer(rank int) (transport.Stall, bool) {
	if rank < 0 || rank >= len(r.by) {
		return transport.Stall{}, false
	}
	s := r.by[rank].Load()
	if s == nil {
		return transport.Stall{}, false
	}
	return *s, true
}
