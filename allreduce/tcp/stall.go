package tcp

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// stallLen is the payload of a stall frame (big-endian):
//
//	off size  field
//	 0   4    Peer, the rank the sender waited for
//	 4   1    What: 1 send, 2 recv, 3 barrier, 4 expose, 5 exchange
//	          (transport.StallWhatCode)
//	 5   3    reserved, 0
//	 8   8    After, in nanoseconds
//
// The frame's header is the notice's Call; its Rank is the link's peer.
const stallLen = 16

func encodeStall(b []byte, s *transport.Stall) {
	_ = b[stallLen-1]
	binary.BigEndian.PutUint32(b[0:], uint32(s.Peer))
	b[4], b[5], b[6], b[7] = transport.StallWhatCode(s.What), 0, 0, 0
	binary.BigEndian.PutUint64(b[8:], uint64(s.After))
}

// decodeStall parses a stall frame's payload b from rank peer of a world
// of size ranks, under header h. The payload is untrusted.
func decodeStall(peer, size int, h transport.Header, b []byte) (transport.Stall, error) {
	if len(b) != stallLen {
		return transport.Stall{}, fmt.Errorf("%w: %d-byte stall notice", errFrame, len(b))
	}
	what, ok := transport.StallWhat(b[4])
	if !ok || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return transport.Stall{}, fmt.Errorf("%w: stall notice kind %d, reserved % x", errFrame, b[4], b[5:8])
	}
	after := time.Duration(binary.BigEndian.Uint64(b[8:])) // out of range: negative or too long, refused by Check
	s := transport.Stall{Rank: peer, Peer: int(binary.BigEndian.Uint32(b[0:])), What: what, After: after, Call: h}
	if err := s.Check(peer, size); err != nil {
		return transport.Stall{}, fmt.Errorf("%w: %v", errFrame, err)
	}
	return s, nil
}

// NoteStall tells every peer, without failing anything, that this rank
// gave up waiting (s, its own notice), and keeps s as its own. Each frame
// goes out on its own goroutine: a link whose writer is held up by a peer
// that stopped reading must not hold up the others; a frame that cannot go
// out within controlTimeout is dropped.
func (c *Conn) NoteStall(s transport.Stall) {
	if s.Rank != c.rank || s.Check(c.rank, c.size) != nil {
		return
	}
	c.stalls.Record(s)
	var b [stallLen]byte
	encodeStall(b[:], &s)
	for _, l := range c.core.Links {
		if l == nil {
			continue
		}
		go l.sendStall(s.Call, b)
	}
}

// PeerStall returns the last stall notice rank sent (or this rank's own),
// and false if it sent none.
func (c *Conn) PeerStall(rank int) (transport.Stall, bool) { return c.stalls.Peer(rank) }

func (l *link) sendStall(h transport.Header, payload [stallLen]byte) {
	if !l.lockWriterWithin(controlTimeout) {
		return
	}
	defer l.wmu.Unlock()
	if l.interrupted.Load() {
		return
	}
	l.writeControl(typeStall, 0, h, payload[:], controlTimeout)
}
