package shm

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/ringddp/ringddp/allreduce/internal/handshake"
	"github.com/ringddp/ringddp/internal/untrusted"
)

// The handshake on each Unix-socket connection, before any descriptor
// changes hands. The listening rank (the lower) speaks first:
//
//	listener → dialer   hello   magic "RDSH" | version u16 | mode u8 | 0 | nonceL [32]        (40 bytes)
//	dialer → listener   answer  magic "RDSH" | version u16 | mode u8 | 0 | nonceD [32] |
//	                            size u32 | from u32 | to u32 | slots u32 | slot size u32 |
//	                            run id length u8 | run id [255] | macD [32]               (348 bytes)
//	listener → dialer   verdict 0 | macL [32]                accepted
//	                            1 | length u16 | reason      refused (length ≤ 256)
//
//	macD = HMAC-SHA256(secret, "ringddp/shm/dialer\x00" | hello | answer without macD)
//	macL = HMAC-SHA256(secret, "ringddp/shm/listener\x00" | hello | answer)
//
// As in the tcp transport and the store, the dialing rank proves the
// secret first, over a nonce the listener chose, and the listener sends
// nothing computed with the secret to a dialer whose proof has not
// checked; the labels differ from each other and from the other
// protocols' (no reflection, no cross-protocol replay). The listener
// checks the proof before it looks at the world it describes, then the
// world size, ranks, ring geometry and run id. mode is 1 with a secret and
// 0 for an insecure world (MACs under an empty key), and the two refuse
// each other. Only after the verdict do the two ranks pass their files'
// descriptors (SCM_RIGHTS, listener first), so a process that has not
// proved the secret never holds a descriptor of, or maps, any rank's
// rings. The exchange is handshake.Exchange, shared with the store; the
// body is the answer's fields between nonceD and macD.
const (
	hsMagic   = 0x48534452 // "RDSH"
	hsVersion = 1
	bodyLen   = 20 + 1 + maxRunID
	maxReason = 256

	modeInsecure = handshake.ModeInsecure
	modeHMAC     = handshake.ModeHMAC

	labelDialer   = "ringddp/shm/dialer\x00"
	labelListener = "ringddp/shm/listener\x00"
)

// hsParams is what a rank's handshakes check.
type hsParams struct {
	secret         []byte
	mode           byte
	size, rank     int
	slots, slotLen int
	runID          string
}

// exchange is the handshake of a rank with p.
func (p *hsParams) exchange() *handshake.Exchange {
	return &handshake.Exchange{
		Protocol:    handshake.Protocol{Magic: hsMagic, Version: hsVersion, Order: binary.LittleEndian, MaxReason: maxReason},
		Name:        "shm",
		Secret:      p.secret,
		Mode:        p.mode,
		DialerLabel: []byte(labelDialer), ListenerLabel: []byte(labelListener),
		ErrProtocol: ErrProtocol, ErrAuth: ErrAuth,
		ModeError: func(who string, peer, own byte) string {
			return fmt.Sprintf("%s runs in mode %d (1: with a secret, 0: insecure), this rank in mode %d", who, peer, own)
		},
	}
}

// listenHandshake authenticates a connection accepted by rank p.rank and
// returns the dialer's rank. admit registers the rank (false: a duplicate,
// with the reason). A refused dialer is told why. The listener checks the
// proof before it looks at the world the body describes. The caller has
// set a deadline.
func listenHandshake(c io.ReadWriter, p *hsParams, admit func(from int) string) (int, error) {
	x := p.exchange()
	a, err := x.Listen(c, bodyLen, "the dialer", "authentication failed: this rank does not accept the dialer's secret")
	if err != nil {
		return -1, err
	}
	b := a.Body()
	size, from, to := binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
	slots, slotLen := binary.LittleEndian.Uint32(b[12:]), binary.LittleEndian.Uint32(b[16:])
	idLen := int(b[20])
	runID := string(b[21 : 21+idLen])
	var reason string
	switch {
	case size != uint32(p.size):
		reason = fmt.Sprintf("world size %d, this rank's %d", size, p.size)
	case to != uint32(p.rank):
		reason = fmt.Sprintf("the dialer wanted rank %d, this is rank %d", to, p.rank)
	case from <= uint32(p.rank) || from >= uint32(p.size):
		reason = fmt.Sprintf("rank %d dialed rank %d, which accepts only ranks %d..%d", from, p.rank, p.rank+1, p.size-1)
	case slots != uint32(p.slots) || slotLen != uint32(p.slotLen):
		reason = fmt.Sprintf("rings of %d slots × %d bytes, this rank's %d × %d", slots, slotLen, p.slots, p.slotLen)
	case runID != p.runID:
		reason = fmt.Sprintf("run id %q, this rank's %q", untrusted.Printable([]byte(runID)), p.runID)
	default:
		reason = admit(int(from))
	}
	if reason != "" {
		x.Refuse(c, reason)
		return -1, fmt.Errorf("%w: refused rank %d: %s", ErrProtocol, from, reason)
	}
	if err := a.Accept(c); err != nil {
		return -1, err
	}
	return int(from), nil
}

// dialHandshake authenticates a connection from rank p.rank to rank to.
// The caller has set a deadline.
func dialHandshake(c io.ReadWriter, p *hsParams, to int) error {
	b := make([]byte, bodyLen)
	binary.LittleEndian.PutUint32(b[0:], uint32(p.size))
	binary.LittleEndian.PutUint32(b[4:], uint32(p.rank))
	binary.LittleEndian.PutUint32(b[8:], uint32(to))
	binary.LittleEndian.PutUint32(b[12:], uint32(p.slots))
	binary.LittleEndian.PutUint32(b[16:], uint32(p.slotLen))
	b[20] = byte(len(p.runID))
	copy(b[21:], p.runID)
	peer := fmt.Sprintf("rank %d", to)
	return p.exchange().Dial(c, b, handshake.Peer{Name: peer, Of: peer + "'s", NoSecret: peer + " does not know the secret"})
}
