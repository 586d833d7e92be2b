package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Frames. After the handshake each connection carries frames in both
// directions, each a fixed 56-byte header and a payload (big-endian):
//
//	off size  field
//	 0   4    magic "RDDF"
//	 4   1    type: 1 data, 2 nack, 3 abort, 4 goodbye, 5 stall
//	 5   1    flags (abort: 1 = the cause is a collective mismatch)
//	 6   2    reserved, 0
//	 8   4    header.Group
//	12   4    header.Step
//	16   8    header.Seq
//	24   8    header.Count
//	32   4    header.Root
//	36   1    header.Kind
//	37   1    header.DType
//	38   1    header.Op
//	39   1    reserved, 0
//	40   8    payload length
//	48   4    reserved, 0
//	52   4    CRC-32C of bytes 0..51
//
// By type:
//   - data: the message's header; the payload is the message, at most
//     Config.MaxMessage bytes, read into the receiver's own pieces, never
//     into a buffer sized by the sender.
//   - nack: the receiver's expected header; payload 64 bytes: the expected
//     length (u64) and the header of the data frame it refused.
//   - abort: header fields 0; payload at most 1 KiB: with flag 1 (the
//     cause is a collective mismatch) first the mismatch record (see
//     encodeMismatch), then the cause as UTF-8 text. The receiver closes
//     its side in acknowledgement.
//   - goodbye: header fields 0, no payload: the sender closed its endpoint.
//     Acknowledged the same way.
//   - stall: the sender's stall notice (transport.Stall; stall.go): the
//     header of the collective it waited in; payload 16 bytes. Fails
//     nothing: the receiver keeps it for its group to read.
//
// Under wire protection (Config.WireProtection, wireprotect.go) each frame
// is a sequence of records, each a body and a 16-byte AES-256-GCM tag:
//
//	record 0      the 56-byte header (magic "RDDM" under mac, "RDDE" under
//	              aead), then its tag
//	record 1..k   the payload in 256 KiB bodies (the last one shorter),
//	              each followed by its tag; k = ceil(length / 256 KiB),
//	              no record for an empty payload
//
// Under mac the bodies travel in the clear and the tag is a GMAC of the
// body (GCM with the body as additional data); under aead the bodies are
// encrypted. The nonce is 4 zero bytes and the direction's record counter
// (u64, from 0, one per record of every frame type), under a key per
// direction: any record out of place fails its check. The receiver reads
// the length from a checked header and checks every payload record before
// it passes on any of it.
const (
	frameMagic  = 0x52444446 // "RDDF"
	headerLen   = 56
	nackLen     = 8 + headerLen
	maxCauseLen = 1024

	typeData    = 1
	typeNack    = 2
	typeAbort   = 3
	typeGoodbye = 4
	typeStall   = 5

	flagMismatch = 1

	// maxPayload bounds any frame's length field, whatever the
	// configuration says.
	maxPayload = 1 << 40
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frame is a decoded frame header.
type frame struct {
	typ    uint8
	flags  uint8
	h      transport.Header
	length int64
}

var errFrame = errors.New("malformed frame")

// encodeHeader writes f into b[:headerLen].
func encodeHeader(b []byte, f *frame) { encodeHeaderMagic(b, f, frameMagic) }

// encodeHeaderMagic writes f into b[:headerLen] under a mode's magic
// (magicOf).
func encodeHeaderMagic(b []byte, f *frame, magic uint32) {
	_ = b[headerLen-1]
	binary.BigEndian.PutUint32(b[0:], magic)
	b[4], b[5], b[6], b[7] = f.typ, f.flags, 0, 0
	binary.BigEndian.PutUint32(b[8:], f.h.Group)
	binary.BigEndian.PutUint32(b[12:], f.h.Step)
	binary.BigEndian.PutUint64(b[16:], f.h.Seq)
	binary.BigEndian.PutUint64(b[24:], uint64(f.h.Count))
	binary.BigEndian.PutUint32(b[32:], uint32(f.h.Root))
	b[36], b[37], b[38], b[39] = f.h.Kind, f.h.DType, f.h.Op, 0
	binary.BigEndian.PutUint64(b[40:], uint64(f.length))
	binary.BigEndian.PutUint32(b[48:], 0)
	binary.BigEndian.PutUint32(b[52:], crc32.Checksum(b[:52], castagnoli))
}

// decodeHeader parses and checks a frame header: magic, checksum, type,
// reserved bytes and the length bounds of each type. It never panics and
// never allocates.
func decodeHeader(b []byte, f *frame) error { return decodeHeaderMagic(b, f, frameMagic) }

// decodeHeaderMagic is decodeHeader for a mode's magic (magicOf).
func decodeHeaderMagic(b []byte, f *frame, magic uint32) error {
	if len(b) < headerLen {
		return fmt.Errorf("%w: %d-byte header", errFrame, len(b))
	}
	if m := binary.BigEndian.Uint32(b[0:]); m != magic {
		return fmt.Errorf("%w: bad magic %#08x", errFrame, m)
	}
	if got, want := binary.BigEndian.Uint32(b[52:]), crc32.Checksum(b[:52], castagnoli); got != want {
		return fmt.Errorf("%w: header checksum %#08x, computed %#08x", errFrame, got, want)
	}
	if b[6] != 0 || b[7] != 0 || b[39] != 0 || binary.BigEndian.Uint32(b[48:]) != 0 {
		return fmt.Errorf("%w: reserved bytes set", errFrame)
	}
	f.typ, f.flags = b[4], b[5]
	f.h = transport.Header{
		Group: binary.BigEndian.Uint32(b[8:]),
		Step:  binary.BigEndian.Uint32(b[12:]),
		Seq:   binary.BigEndian.Uint64(b[16:]),
		Count: int64(binary.BigEndian.Uint64(b[24:])),
		Root:  int32(binary.BigEndian.Uint32(b[32:])),
		Kind:  b[36],
		DType: b[37],
		Op:    b[38],
	}
	l := binary.BigEndian.Uint64(b[40:])
	switch f.typ {
	case typeData:
		if l > maxPayload {
			return fmt.Errorf("%w: data length %d", errFrame, l)
		}
	case typeNack:
		if l != nackLen {
			return fmt.Errorf("%w: nack length %d", errFrame, l)
		}
	case typeAbort:
		if l > maxCauseLen {
			return fmt.Errorf("%w: abort length %d", errFrame, l)
		}
	case typeGoodbye:
		if l != 0 {
			return fmt.Errorf("%w: goodbye length %d", errFrame, l)
		}
	case typeStall:
		if l != stallLen {
			return fmt.Errorf("%w: stall length %d", errFrame, l)
		}
	default:
		return fmt.Errorf("%w: type %d", errFrame, f.typ)
	}
	if (f.typ == typeAbort && f.flags&^flagMismatch != 0) || (f.typ != typeAbort && f.flags != 0) {
		return fmt.Errorf("%w: flags %#x on type %d", errFrame, f.flags, f.typ)
	}
	f.length = int64(l)
	return nil
}
