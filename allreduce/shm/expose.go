package shm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// The exposure area: how ranks of one host lend one another their
// buffers (transport.PeerMemory) for the direct algorithms. A process
// cannot map another's heap, so an exposure is a copy: Expose copies the
// caller's buffer into an exposure buffer in the rank's own file, and the
// views every rank gets are those copies, in the files all ranks map. A
// rank writes only its own copy (the direct algorithm's reduced chunk),
// which peers read after Arrive.
//
// Exposure k (counted per endpoint, from 0; every rank exposes in the
// same order, as collectives run) uses buffer k mod 2. Release does not
// wait: a rank writes buffer k mod 2 again only for exposure k+2, after
// every peer has exposed k+1 — which each does only after its Release
// of k, when it has stopped reading the views of k.
//
// Area layout (little-endian), at regionLayout.exposeOff:
//
//	0     arrived u64: exposures this rank has Arrived in (k+1 after
//	      Arrive of exposure k), written by the owner only
//	64    buffer 0: header (exposeHeaderLen bytes), then exposeCap bytes
//	64+B  buffer 1, the same (B = exposeHeaderLen + exposeCap)
//
// Buffer header:
//
//	0   exposed u64: k+1 once exposure k's copy and fields are in place
//	    (stored last)
//	8   length u64, at most exposeCap
//	16  the exposure's collective header [32]
//	48  CRC-32C of bytes 8..48
//	52  reserved, 0
const (
	exposeCap       = 64 << 10
	exposeHeaderLen = 64
	exposeBufLen    = exposeHeaderLen + exposeCap
	exposeAreaLen   = 64 + 2*exposeBufLen
)

// exposeBufOff is the offset of buffer i within the area.
func exposeBufOff(i uint64) int64 { return 64 + int64(i%2)*exposeBufLen }

// encodeExposeFields writes a buffer header's fields (everything but the
// exposed word) for a copy of n bytes under header h.
func encodeExposeFields(b []byte, h transport.Header, n int) {
	_ = b[exposeHeaderLen-1]
	binary.LittleEndian.PutUint64(b[8:], uint64(n))
	encodeTHeader(b[16:], h)
	binary.LittleEndian.PutUint32(b[48:], crc32.Checksum(b[8:48], castagnoli))
	binary.LittleEndian.PutUint32(b[52:], 0)
}

// decodeExposeFields parses a buffer header copied out of a peer's file:
// the copy's length and header. Anything malformed wraps ErrCorrupt.
func decodeExposeFields(b []byte) (transport.Header, int, error) {
	if len(b) < exposeHeaderLen {
		return transport.Header{}, 0, fmt.Errorf("%w: %d-byte exposure header", ErrCorrupt, len(b))
	}
	if got, want := binary.LittleEndian.Uint32(b[48:]), crc32.Checksum(b[8:48], castagnoli); got != want {
		return transport.Header{}, 0, fmt.Errorf("%w: exposure header checksum %#08x, computed %#08x", ErrCorrupt, got, want)
	}
	n := binary.LittleEndian.Uint64(b[8:])
	h, clean := decodeTHeader(b[16:])
	if n > exposeCap || !clean || binary.LittleEndian.Uint32(b[52:]) != 0 {
		return transport.Header{}, 0, fmt.Errorf("%w: exposure of %d bytes (at most %d), reserved bytes set: %v", ErrCorrupt, n, exposeCap, !clean)
	}
	return h, int(n), nil
}

// ExposeLimit is the most bytes an endpoint lends at a time (its
// MaxExposure): what the cost model's Shape.LendLimit is for shm.
const ExposeLimit = exposeCap
