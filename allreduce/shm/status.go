package shm

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/untrusted"
)

// Status and nack blocks: how a rank tells its peers that it closed or
// aborted (its status block, in its own file) and a sender that its
// message was refused (the nack block of the ring it came on). Each is
// written once: the body first, then the state word last (an atomic
// store), so a reader that sees a state sees the whole body; the body has
// a CRC-32C, and a reader copies it out of shared memory before checking.
//
// Status block (statusLen bytes, little-endian):
//
//	0   state u32: 0 alive, 1 closed (goodbye), 2 aborted
//	4   flags u32: 1 = the abort's cause is a collective mismatch
//	8   record length u32, at most maxStatusRecord
//	12  CRC-32C of bytes 4..12 and of the record
//	16  record: with flag 1 a mismatch record (mismatchRecordLen), then
//	    the cause as text (at most maxCauseLen bytes in all)
//
// Nack block (nackLen bytes):
//
//	0   state u32: 0 none, 1 refused
//	4   CRC-32C of bytes 8..88
//	8   expected length u64 | refused length u64 | expected header [32] |
//	    refused header [32]
const (
	stateAlive   = 0
	stateClosed  = 1
	stateAborted = 2

	flagMismatch = 1

	maxCauseLen       = 1024
	mismatchRecordLen = 24 + 2*theaderLen
	maxStatusRecord   = maxCauseLen
	statusLen         = 16 + maxStatusRecord

	nackLen = 8 + 16 + 2*theaderLen
)

// encodeStatus writes the body of a status block for state and cause
// into b[:statusLen] (everything but the state word) and returns nothing:
// the caller stores the state last.
func encodeStatus(b []byte, cause error) {
	_ = b[statusLen-1]
	text := []byte(cause.Error())
	var rec []byte
	var flags uint32
	if mm, ok := asMismatch(cause); ok {
		flags = flagMismatch
		rec = make([]byte, mismatchRecordLen, maxCauseLen)
		encodeMismatch(rec, mm)
	} else if isMismatch(cause) {
		flags = flagMismatch
	}
	room := maxStatusRecord - len(rec)
	if len(text) > room {
		text = text[:room]
	}
	rec = append(rec, text...)
	binary.LittleEndian.PutUint32(b[4:], flags)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(rec)))
	copy(b[16:], rec)
	binary.LittleEndian.PutUint32(b[12:], statusCRC(b[4:12], rec))
}

func statusCRC(fixed, rec []byte) uint32 {
	return crc32.Update(crc32.Checksum(fixed, castagnoli), castagnoli, rec)
}

// decodeStatus parses a status block copied out of shared memory, of
// rank peer in a world of size ranks, whose state word read state. It
// returns the error peer's calls should fail with.
func decodeStatus(b []byte, state uint32, peer, size int) error {
	if len(b) < statusLen {
		return fmt.Errorf("%w: %d-byte status", ErrCorrupt, len(b))
	}
	flags := binary.LittleEndian.Uint32(b[4:])
	n := binary.LittleEndian.Uint32(b[8:])
	if n > maxStatusRecord || flags&^flagMismatch != 0 {
		return fmt.Errorf("%w: status record of %d bytes, flags %#x", ErrCorrupt, n, flags)
	}
	rec := b[16 : 16+n]
	if got, want := binary.LittleEndian.Uint32(b[12:]), statusCRC(b[4:12], rec); got != want {
		return fmt.Errorf("%w: status checksum %#08x, computed %#08x", ErrCorrupt, got, want)
	}
	switch state {
	case stateClosed:
		return errPeerClosed
	case stateAborted:
	default:
		return fmt.Errorf("%w: status state %d", ErrCorrupt, state)
	}
	e := &AbortError{Rank: peer, Mismatch: flags&flagMismatch != 0}
	if e.Mismatch && len(rec) >= mismatchRecordLen {
		mm, err := decodeMismatch(rec[:mismatchRecordLen], size)
		if err != nil {
			return err
		}
		e.Detail = mm
		rec = rec[mismatchRecordLen:]
	}
	e.Cause = untrusted.Printable(rec)
	return e
}

func encodeMismatch(b []byte, mm *transport.MismatchError) {
	_ = b[mismatchRecordLen-1]
	binary.LittleEndian.PutUint32(b[0:], uint32(mm.Rank))
	binary.LittleEndian.PutUint32(b[4:], uint32(mm.Peer))
	binary.LittleEndian.PutUint64(b[8:], uint64(mm.LocalBytes))
	binary.LittleEndian.PutUint64(b[16:], uint64(mm.RemoteBytes))
	encodeTHeader(b[24:], mm.Local)
	encodeTHeader(b[24+theaderLen:], mm.Remote)
}

// decodeMismatch parses a mismatch record of a status block copied out of
// shared memory, naming ranks of a world of size.
func decodeMismatch(b []byte, size int) (*transport.MismatchError, error) {
	if len(b) < mismatchRecordLen {
		return nil, fmt.Errorf("%w: %d-byte mismatch record", ErrCorrupt, len(b))
	}
	rank, peer := binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint32(b[4:])
	if rank >= uint32(size) || peer >= uint32(size) {
		return nil, fmt.Errorf("%w: mismatch record names ranks %d and %d of %d", ErrCorrupt, rank, peer, size)
	}
	lb, rb := binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	if lb > maxPayload || rb > maxPayload {
		return nil, fmt.Errorf("%w: mismatch record lengths %d and %d", ErrCorrupt, lb, rb)
	}
	local, ok1 := decodeTHeader(b[24:])
	remote, ok2 := decodeTHeader(b[24+theaderLen:])
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: mismatch record reserved bytes set", ErrCorrupt)
	}
	return &transport.MismatchError{Rank: int(rank), Peer: int(peer), Local: local, LocalBytes: int(lb),
		Remote: remote, RemoteBytes: int(rb)}, nil
}

// encodeNack writes a nack block's body (not its state word) into
// b[:nackLen]: this rank expected (exp, expLen) and refused (ref, refLen).
func encodeNack(b []byte, exp transport.Header, expLen int, ref transport.Header, refLen uint64) {
	_ = b[nackLen-1]
	binary.LittleEndian.PutUint64(b[8:], uint64(expLen))
	binary.LittleEndian.PutUint64(b[16:], refLen)
	encodeTHeader(b[24:], exp)
	encodeTHeader(b[24+theaderLen:], ref)
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:nackLen], castagnoli))
}

// decodeNack parses a nack block copied out of shared memory, written by
// rank peer about a message from rank self: the mismatch as self sees it.
func decodeNack(b []byte, self, peer int) (*transport.MismatchError, error) {
	if len(b) < nackLen {
		return nil, fmt.Errorf("%w: %d-byte nack", ErrCorrupt, len(b))
	}
	if got, want := binary.LittleEndian.Uint32(b[4:]), crc32.Checksum(b[8:nackLen], castagnoli); got != want {
		return nil, fmt.Errorf("%w: nack checksum %#08x, computed %#08x", ErrCorrupt, got, want)
	}
	expLen, refLen := binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	if expLen > maxPayload || refLen > maxPayload {
		return nil, fmt.Errorf("%w: nack lengths %d and %d", ErrCorrupt, expLen, refLen)
	}
	exp, ok1 := decodeTHeader(b[24:])
	ref, ok2 := decodeTHeader(b[24+theaderLen:])
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: nack reserved bytes set", ErrCorrupt)
	}
	return &transport.MismatchError{Rank: self, Peer: peer, Local: ref, LocalBytes: int(refLen), Remote: exp, RemoteBytes: int(expLen)}, nil
}
