package shm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Stall block: a rank's stall notice (transport.Stall), in its own file
// at stallOff, written once like the status block (the body, then the
// state word). Little-endian:
//
//	0   state u32: 0 none, 1 noted
//	4   CRC-32C of bytes 8..56
//	8   Peer u32 | What u32 (transport.StallWhatCode) | After u64 (ns)
//	24  Call, the collective's header [32]
//
// The notice's Rank is the file's owner.
const (
	stallOff      = 2048
	stallBlockLen = 24 + theaderLen
	stallNoted    = 1
)

// encodeStall writes the body of a stall block (everything but the state
// word) into b[:stallBlockLen].
func encodeStall(b []byte, s *transport.Stall) {
	_ = b[stallBlockLen-1]
	binary.LittleEndian.PutUint32(b[8:], uint32(s.Peer))
	binary.LittleEndian.PutUint32(b[12:], uint32(transport.StallWhatCode(s.What)))
	binary.LittleEndian.PutUint64(b[16:], uint64(s.After))
	encodeTHeader(b[24:], s.Call)
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:stallBlockLen], castagnoli))
}

// decodeStall parses a stall block copied out of rank peer's file, of a
// world of size ranks, whose state word read noted. It never trusts the
// bytes: a bad checksum, code or rank is an error wrapping ErrCorrupt.
func decodeStall(b []byte, peer, size int) (transport.Stall, error) {
	if len(b) < stallBlockLen {
		return transport.Stall{}, fmt.Errorf("%w: %d-byte stall block", ErrCorrupt, len(b))
	}
	if got, want := binary.LittleEndian.Uint32(b[4:]), crc32.Checksum(b[8:stallBlockLen], castagnoli); got != want {
		return transport.Stall{}, fmt.Errorf("%w: stall block checksum %#08x, computed %#08x", ErrCorrupt, got, want)
	}
	code := binary.LittleEndian.Uint32(b[12:])
	what, ok := transport.StallWhat(uint8(code))
	call, clean := decodeTHeader(b[24:])
	if !ok || code > 0xff || !clean {
		return transport.Stall{}, fmt.Errorf("%w: stall block kind %d, reserved bytes set: %v", ErrCorrupt, code, !clean)
	}
	after := time.Duration(binary.LittleEndian.Uint64(b[16:])) // out of range: negative or too long, refused by Check
	s := transport.Stall{Rank: peer, Peer: int(int32(binary.LittleEndian.Uint32(b[8:]))), What: what, After: after, Call: call}
	if err := s.Check(peer, size); err != nil {
		return transport.Stall{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return s, nil
}

// The stall block lies between the status block and the ring controls
// (a negative difference would not compile).
const (
	_ = uint(stallOff - statusOff - statusLen)
	_ = uint(controlOff - stallOff - stallBlockLen)
)
