package rendezvous

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Request and reply framing after the handshake (with a secret, the
// header and the body of each are followed by their tags: tcpstore_link.go):
//
//	request: op u8 | 0 0 0 | keyLen u32 | valLen u32 | waitMs u32 | key | value
//	reply:   status u8 | 0 0 0 | len u32 | body
//
// Set carries the value; Add carries the delta as 8 bytes big-endian and is
// answered with the new value the same way; Get carries how long the server
// may wait for the key (the server waits at most its own Timeout), and
// waitMs is 0 for the others. Status: 0 ok, 1 timed out (body: why, maybe
// empty), 2 error (body: message), 3 not a counter (body: message), 4 a
// limit refused the request (body: which). A client sends its next request
// only after the reply to the last: bytes arriving while a Get waits mean
// the client is gone or broken, and end the connection.
const (
	opSet = 1
	opGet = 2
	opAdd = 3

	stOK         = 0
	stTimeout    = 1
	stError      = 2
	stNotCounter = 3
	stLimit      = 4

	reqHeaderLen   = 16
	replyHeaderLen = 8
	maxErrorText   = 1024
)

// request is a decoded request header.
type request struct {
	op             byte
	keyLen, valLen int
	wait           time.Duration // Get only
}

// requestError is a request header the server refuses, and the reply that
// tells the client why.
type requestError struct {
	status byte
	msg    string
}

func (e *requestError) Error() string { return e.msg }

// decodeRequest checks a request header against the protocol and the
// server's longest value, before anything is allocated for the body.
func decodeRequest(h []byte, maxValue int) (request, error) {
	if len(h) < reqHeaderLen {
		return request{}, &requestError{stError, fmt.Sprintf("bad request: %d-byte header", len(h))}
	}
	r := request{op: h[0]}
	keyLen := binary.BigEndian.Uint32(h[4:])
	valLen := binary.BigEndian.Uint32(h[8:])
	waitMs := binary.BigEndian.Uint32(h[12:])
	bad := func(why string) (request, error) {
		return request{}, &requestError{stError, fmt.Sprintf("bad request (op %d, key %d bytes, value %d bytes): %s", r.op, keyLen, valLen, why)}
	}
	switch {
	case r.op < opSet || r.op > opAdd:
		return bad("unknown op")
	case h[1] != 0 || h[2] != 0 || h[3] != 0:
		return bad("reserved bytes set")
	case keyLen == 0 || keyLen > MaxKeyLen:
		return bad(fmt.Sprintf("keys are 1..%d bytes", MaxKeyLen))
	case r.op == opGet && valLen != 0:
		return bad("a get carries no value")
	case r.op == opAdd && valLen != 8:
		return bad("an add carries an 8-byte delta")
	case r.op != opGet && waitMs != 0:
		return bad("only a get waits")
	case uint64(valLen) > uint64(max(maxValue, 0)):
		return request{}, &requestError{stLimit, fmt.Sprintf("a value of %d bytes is longer than the store's limit of %d bytes (MaxValueLen)", valLen, maxValue)}
	}
	r.keyLen, r.valLen = int(keyLen), int(valLen)
	r.wait = time.Duration(waitMs) * time.Millisecond
	return r, nil
}

// encodeRequest writes a request header into h.
func encodeRequest(h []byte, r request) {
	h[0], h[1], h[2], h[3] = r.op, 0, 0, 0
	binary.BigEndian.PutUint32(h[4:], uint32(r.keyLen))
	binary.BigEndian.PutUint32(h[8:], uint32(r.valLen))
	ms := max(r.wait.Milliseconds(), 0)
	binary.BigEndian.PutUint32(h[12:], uint32(min(ms, math.MaxUint32)))
}

// encodeReply writes the header of a reply with an n-byte body into h.
func encodeReply(h []byte, status byte, n int) {
	h[0], h[1], h[2], h[3] = status, 0, 0, 0
	binary.BigEndian.PutUint32(h[4:], uint32(n))
}

// decodeReply checks a reply header before anything is allocated for its
// body: an answer's body is at most maxValue bytes, a refusal's at most
// maxErrorText.
func decodeReply(h []byte, maxValue int) (status byte, n int, err error) {
	status, size := h[0], binary.BigEndian.Uint32(h[4:])
	limit := uint64(max(maxValue, 0))
	if status != stOK {
		limit = maxErrorText
	}
	if status > stLimit || uint64(size) > limit {
		return 0, 0, fmt.Errorf("%w: reply status %d with %d bytes", ErrProtocol, status, size)
	}
	return status, int(size), nil
}
