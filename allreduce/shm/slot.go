package shm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Slot headers. Every slot starts with a 128-byte header (little-endian):
//
//	off size  field
//	 0   4    magic "RDSS"
//	 4   1    type: 1 data
//	 5   3    reserved, 0
//	 8   8    slot sequence number: the ring's head when it was written
//	16  32    the message's transport.Header (encodeTHeader)
//	48   8    message length (of the whole message)
//	56   8    offset of this piece in the message
//	64   4    piece length (≤ slot size; every piece but the last is full)
//	68  56    reserved, 0
//	124  4    CRC-32C of bytes 0..67 (the reserved bytes must be 0)
//
// A message of n bytes takes max(1, ⌈n/C⌉) consecutive slots. The
// receiver copies the header out of shared memory before it looks at it
// (the peer could change it meanwhile), checks the checksum, magic, type,
// reserved bytes and sequence number, compares the first slot's header
// and length with what it expects (a *transport.MismatchError and a nack
// if they differ) and every later slot's with the first's, and checks the
// offset and the piece length against its own count: anything else is an
// error wrapping ErrCorrupt, and nothing of the slot is used.
const (
	slotMagic     = 0x53534452 // "RDSS"
	slotHeaderLen = 128
	// slotFieldsLen is the header's fields, which the checksum covers:
	// the reserved bytes after them are checked to be zero instead, which
	// halves the checksum's work on every message.
	slotFieldsLen = 68
	slotData      = 1
	theaderLen    = 32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// slotHeader is a decoded slot header.
type slotHeader struct {
	seq   uint64
	h     transport.Header
	total uint64
	off   uint64
	piece uint32
}

// encodeTHeader writes h into b[:theaderLen].
func encodeTHeader(b []byte, h transport.Header) {
	_ = b[theaderLen-1]
	binary.LittleEndian.PutUint32(b[0:], h.Group)
	binary.LittleEndian.PutUint32(b[4:], h.Step)
	binary.LittleEndian.PutUint64(b[8:], h.Seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(h.Count))
	binary.LittleEndian.PutUint32(b[24:], uint32(h.Root))
	b[28], b[29], b[30], b[31] = h.Kind, h.DType, h.Op, 0
}

func decodeTHeader(b []byte) (transport.Header, bool) {
	_ = b[theaderLen-1]
	return transport.Header{
		Group: binary.LittleEndian.Uint32(b[0:]),
		Step:  binary.LittleEndian.Uint32(b[4:]),
		Seq:   binary.LittleEndian.Uint64(b[8:]),
		Count: int64(binary.LittleEndian.Uint64(b[16:])),
		Root:  int32(binary.LittleEndian.Uint32(b[24:])),
		Kind:  b[28],
		DType: b[29],
		Op:    b[30],
	}, b[31] == 0
}

// encodeSlot writes a data slot's header into b[:slotHeaderLen].
func encodeSlot(b []byte, seq uint64, h transport.Header, total, off uint64, piece uint32) {
	_ = b[slotHeaderLen-1]
	clear(b[:slotHeaderLen])
	binary.LittleEndian.PutUint32(b[0:], slotMagic)
	b[4] = slotData
	binary.LittleEndian.PutUint64(b[8:], seq)
	encodeTHeader(b[16:], h)
	binary.LittleEndian.PutUint64(b[48:], total)
	binary.LittleEndian.PutUint64(b[56:], off)
	binary.LittleEndian.PutUint32(b[64:], piece)
	binary.LittleEndian.PutUint32(b[124:], crc32.Checksum(b[:slotFieldsLen], castagnoli))
}

// decodeSlot parses and checks a slot header that the caller copied out
// of shared memory: checksum, magic, type, reserved bytes, and lengths
// bounded by maxPiece and maxPayload. It never panics.
func decodeSlot(b []byte, s *slotHeader, maxPiece int) error {
	if len(b) < slotHeaderLen {
		return fmt.Errorf("%w: %d-byte slot header", ErrCorrupt, len(b))
	}
	if got, want := binary.LittleEndian.Uint32(b[124:]), crc32.Checksum(b[:slotFieldsLen], castagnoli); got != want {
		return fmt.Errorf("%w: slot header checksum %#08x, computed %#08x", ErrCorrupt, got, want)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != slotMagic {
		return fmt.Errorf("%w: slot magic %#08x", ErrCorrupt, m)
	}
	if b[4] != slotData {
		return fmt.Errorf("%w: slot type %d", ErrCorrupt, b[4])
	}
	if b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return fmt.Errorf("%w: reserved slot bytes set", ErrCorrupt)
	}
	var or uint64
	for i := slotFieldsLen; i+8 <= 124; i += 8 {
		or |= binary.LittleEndian.Uint64(b[i:])
	}
	if or|uint64(binary.LittleEndian.Uint32(b[120:])) != 0 {
		return fmt.Errorf("%w: reserved slot bytes set", ErrCorrupt)
	}
	var ok bool
	s.seq = binary.LittleEndian.Uint64(b[8:])
	if s.h, ok = decodeTHeader(b[16:]); !ok {
		return fmt.Errorf("%w: reserved slot bytes set", ErrCorrupt)
	}
	s.total = binary.LittleEndian.Uint64(b[48:])
	s.off = binary.LittleEndian.Uint64(b[56:])
	s.piece = binary.LittleEndian.Uint32(b[64:])
	switch {
	case s.total > maxPayload:
		return fmt.Errorf("%w: message length %d", ErrCorrupt, s.total)
	case s.off > s.total:
		return fmt.Errorf("%w: piece offset %d past the message's %d bytes", ErrCorrupt, s.off, s.total)
	case int64(s.piece) > int64(maxPiece) || uint64(s.piece) > s.total-s.off:
		return fmt.Errorf("%w: piece of %d bytes at offset %d of %d (slot size %d)", ErrCorrupt, s.piece, s.off, s.total, maxPiece)
	}
	return nil
}
