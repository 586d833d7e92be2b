package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/untrusted"
)

// AbortError is the cause a peer sent in its abort frame when it aborted:
// its Rank, its Cause as text, and whether it was a collective Mismatch
// (then errors.Is(err, transport.ErrMismatch) holds, and Detail, when the
// frame carried the mismatch record, is the *transport.MismatchError, so
// the ranks and calls of the mismatch survive the trip over the network:
// a rank that receives it can tell whether its own call is one of the
// two). It is the same type as shm.AbortError.
type AbortError = mpconn.AbortError

// mismatchRecordLen is the size of the mismatch record that starts a
// mismatch abort's payload (big-endian):
//
//	off size  field
//	 0   4    Rank (the rank whose header is Local)
//	 4   4    Peer
//	 8   8    LocalBytes
//	16   8    RemoteBytes
//	24  56    Local, as a data frame header of length 0
//	80  56    Remote, the same
const mismatchRecordLen = 24 + 2*headerLen

// abortPayload is the payload of the abort frame for cause: the mismatch
// record when the cause holds a mismatch, then as much of the cause's
// text as fits in maxCauseLen bytes.
func abortPayload(cause error) (flags byte, payload []byte) {
	text := []byte(cause.Error())
	var mm *transport.MismatchError
	if errors.As(cause, &mm) {
		flags = flagMismatch
		payload = make([]byte, mismatchRecordLen, maxCauseLen)
		encodeMismatch(payload, mm)
	} else if errors.Is(cause, transport.ErrMismatch) {
		flags = flagMismatch // a mismatch without its record (not made by this package's peers)
	}
	room := maxCauseLen - len(payload)
	if len(text) > room {
		text = text[:room]
	}
	return flags, append(payload, text...)
}

func encodeMismatch(b []byte, mm *transport.MismatchError) {
	_ = b[mismatchRecordLen-1]
	binary.BigEndian.PutUint32(b[0:], uint32(mm.Rank))
	binary.BigEndian.PutUint32(b[4:], uint32(mm.Peer))
	binary.BigEndian.PutUint64(b[8:], uint64(mm.LocalBytes))
	binary.BigEndian.PutUint64(b[16:], uint64(mm.RemoteBytes))
	encodeHeader(b[24:], &frame{typ: typeData, h: mm.Local})
	encodeHeader(b[24+headerLen:], &frame{typ: typeData, h: mm.Remote})
}

// decodeAbort parses an abort frame's payload from rank peer of a world of
// size ranks. The payload is untrusted: ranks out of range, a record with a
// bad checksum or a record cut short are protocol errors; the text is
// made printable.
func decodeAbort(peer, size int, flags byte, payload []byte) (*AbortError, error) {
	e := &AbortError{Rank: peer, Mismatch: flags&flagMismatch != 0}
	if e.Mismatch && len(payload) >= mismatchRecordLen {
		mm, err := decodeMismatch(payload[:mismatchRecordLen], size)
		if err != nil {
			return nil, err
		}
		e.Detail = mm
		payload = payload[mismatchRecordLen:]
	}
	e.Cause = untrusted.Printable(payload)
	return e, nil
}

func decodeMismatch(b []byte, size int) (*transport.MismatchError, error) {
	rank, peer := binary.BigEndian.Uint32(b[0:]), binary.BigEndian.Uint32(b[4:])
	if rank >= uint32(size) || peer >= uint32(size) {
		return nil, fmt.Errorf("%w: mismatch record names ranks %d and %d of %d", errFrame, rank, peer, size)
	}
	lb, rb := binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(b[16:])
	if lb > maxPayload || rb > maxPayload {
		return nil, fmt.Errorf("%w: mismatch record lengths %d and %d", errFrame, lb, rb)
	}
	var local, remote frame
	if err := decodeHeader(b[24:], &local); err != nil {
		return nil, fmt.Errorf("mismatch record: %w", err)
	}
	if err := decodeHeader(b[24+headerLen:], &remote); err != nil {
		return nil, fmt.Errorf("mismatch record: %w", err)
	}
	return &transport.MismatchError{Rank: int(rank), Peer: int(peer), Local: local.h, LocalBytes: int(lb),
		Remote: remote.h, RemoteBytes: int(rb)}, nil
}
