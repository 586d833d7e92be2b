package shm

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Whatever a peer (or anything else that can write the mapping) leaves in
// a slot header, decoding it never panics; what decodes re-encodes to a
// header that decodes the same. The fuzzer's input also gets a valid
// checksum half the time, so that it reaches the checks behind it.
func FuzzDecodeSlot(f *testing.F) {
	valid := make([]byte, slotHeaderLen)
	encodeSlot(valid, 7, transport.Header{Group: 1, Seq: 2, Kind: 1, DType: 1, Op: 1, Root: -1, Count: 1000, Step: 3}, 4000, 256, 1024)
	f.Add(valid, false)
	f.Add(make([]byte, slotHeaderLen), true)
	f.Add([]byte{1, 2, 3}, false)
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC && len(b) >= slotHeaderLen {
			binary.LittleEndian.PutUint32(b[124:], crc32.Checksum(b[:slotFieldsLen], castagnoli))
		}
		var s slotHeader
		err := decodeSlot(b, &s, 1<<20)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		again := make([]byte, slotHeaderLen)
		encodeSlot(again, s.seq, s.h, s.total, s.off, s.piece)
		var s2 slotHeader
		if err := decodeSlot(again, &s2, 1<<20); err != nil || s2 != s {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", s, s2, err)
		}
	})
}

// Status and nack blocks from a peer: decoding never panics, whatever the
// bytes, state word and rank numbers.
func FuzzDecodeStatus(f *testing.F) {
	f.Add(make([]byte, statusLen), uint32(stateAborted), 1, 4)
	f.Add(make([]byte, nackLen), uint32(1), 0, 2)
	f.Add([]byte{0xff}, uint32(9), -1, 0)
	f.Fuzz(func(t *testing.T, b []byte, state uint32, peer, size int) {
		_ = decodeStatus(b, state, peer, size)
		_, _ = decodeMismatch(b, size)
		_, _ = decodeNack(b, peer, size)
	})
}

// FuzzDecodeStall: whatever a peer leaves in its stall block, decoding
// never panics, and what decodes passes the notice's checks and encodes
// back to the same block. Half the inputs get a valid checksum.
func FuzzDecodeStall(f *testing.F) {
	b := make([]byte, stallBlockLen)
	encodeStall(b, &transport.Stall{Rank: 1, Peer: 3, What: "exchange", After: 5e9, Call: transport.Header{Seq: 9, Kind: 1, Count: 100}})
	f.Add(b, false)
	f.Add(make([]byte, stallBlockLen), true)
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC && len(b) >= stallBlockLen {
			binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:stallBlockLen], castagnoli))
		}
		s, err := decodeStall(b, 1, 4)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if err := s.Check(1, 4); err != nil {
			t.Fatalf("accepted %+v: %v", s, err)
		}
		out := make([]byte, stallBlockLen)
		encodeStall(out, &s)
		if string(out[4:]) != string(b[4:stallBlockLen]) {
			t.Fatalf("round trip:\n in %x\nout %x", b[4:stallBlockLen], out[4:])
		}
	})
}

// FuzzDecodeExpose: whatever a peer leaves in an exposure buffer's
// header, decoding never panics, what decodes has a length within the
// buffer, and encodes back to the same fields. Half the inputs get a
// valid checksum.
func FuzzDecodeExpose(f *testing.F) {
	b := make([]byte, exposeHeaderLen)
	encodeExposeFields(b, transport.Header{Seq: 3, Kind: 1, Count: 2}, 8)
	f.Add(b, false)
	f.Add(make([]byte, exposeHeaderLen), true)
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC && len(b) >= exposeHeaderLen {
			binary.LittleEndian.PutUint32(b[48:], crc32.Checksum(b[8:48], castagnoli))
		}
		h, n, err := decodeExposeFields(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if n < 0 || n > exposeCap {
			t.Fatalf("accepted length %d", n)
		}
		out := make([]byte, exposeHeaderLen)
		encodeExposeFields(out, h, n)
		if string(out[8:56]) != string(b[8:56]) {
			t.Fatalf("round trip:\n in %x\nout %x", b[8:56], out[8:56])
		}
	})
}
