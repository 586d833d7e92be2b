package shm

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"

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
// rings.
const (
	hsMagic    = 0x48534452 // "RDSH"
	hsVersion  = 1
	nonceLen   = 32
	macLen     = sha256.Size
	helloLen   = 8 + nonceLen
	answerBody = helloLen + 20 + 1 + maxRunID
	answerLen  = answerBody + macLen
	maxReason  = 256

	modeInsecure = 0
	modeHMAC     = 1
)

var (
	labelDialer   = []byte("ringddp/shm/dialer\x00")
	labelListener = []byte("ringddp/shm/listener\x00")
)

// hsParams is what a rank's handshakes check.
type hsParams struct {
	secret         []byte
	mode           byte
	size, rank     int
	slots, slotLen int
	runID          string
}

func (p *hsParams) mac(label []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, p.secret)
	m.Write(label)
	for _, b := range parts {
		m.Write(b)
	}
	return m.Sum(nil)
}

func putHello(b []byte, mode byte, nonce []byte) {
	binary.LittleEndian.PutUint32(b[0:], hsMagic)
	binary.LittleEndian.PutUint16(b[4:], hsVersion)
	b[6], b[7] = mode, 0
	copy(b[8:helloLen], nonce)
}

func checkHello(b []byte, mode byte, who string) error {
	if binary.LittleEndian.Uint32(b[0:]) != hsMagic {
		return fmt.Errorf("%w: %s does not speak the ringddp shm protocol", ErrProtocol, who)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != hsVersion {
		return fmt.Errorf("%w: %s speaks shm protocol version %d, this build version %d", ErrProtocol, who, v, hsVersion)
	}
	if b[6] != mode {
		return fmt.Errorf("%w: %s runs in mode %d (1: with a secret, 0: insecure), this rank in mode %d", ErrAuth, who, b[6], mode)
	}
	return nil
}

func newNonce() ([]byte, error) {
	n := make([]byte, nonceLen)
	_, err := rand.Read(n)
	return n, err
}

// listenHandshake authenticates a connection accepted by rank p.rank and
// returns the dialer's rank. admit registers the rank (false: a duplicate,
// with the reason). A refused dialer is told why. The caller has set a
// deadline.
func listenHandshake(c io.ReadWriter, p *hsParams, admit func(from int) string) (int, error) {
	nonce, err := newNonce()
	if err != nil {
		return -1, err
	}
	hello := make([]byte, helloLen)
	putHello(hello, p.mode, nonce)
	if _, err := c.Write(hello); err != nil {
		return -1, err
	}
	answer := make([]byte, answerLen)
	if _, err := io.ReadFull(c, answer); err != nil {
		return -1, err
	}
	if err := checkHello(answer, p.mode, "the dialer"); err != nil {
		refuse(c, err.Error())
		return -1, err
	}
	if !hmac.Equal(p.mac(labelDialer, hello, answer[:answerBody]), answer[answerBody:]) {
		refuse(c, "authentication failed: this rank does not accept the dialer's secret")
		return -1, fmt.Errorf("%w: the dialer does not know the secret", ErrAuth)
	}
	b := answer[helloLen:]
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
		refuse(c, reason)
		return -1, fmt.Errorf("%w: refused rank %d: %s", ErrProtocol, from, reason)
	}
	verdict := make([]byte, 1+macLen)
	copy(verdict[1:], p.mac(labelListener, hello, answer))
	if _, err := c.Write(verdict); err != nil {
		return -1, err
	}
	return int(from), nil
}

func refuse(c io.Writer, reason string) {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	b := make([]byte, 3+len(reason))
	b[0] = 1
	binary.LittleEndian.PutUint16(b[1:], uint16(len(reason)))
	copy(b[3:], reason)
	_, _ = c.Write(b)
}

// dialHandshake authenticates a connection from rank p.rank to rank to.
// The caller has set a deadline.
func dialHandshake(c io.ReadWriter, p *hsParams, to int) error {
	hello := make([]byte, helloLen)
	if _, err := io.ReadFull(c, hello); err != nil {
		return fmt.Errorf("reading rank %d's hello: %w", to, err)
	}
	if err := checkHello(hello, p.mode, fmt.Sprintf("rank %d", to)); err != nil {
		return err
	}
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	answer := make([]byte, answerLen)
	putHello(answer, p.mode, nonce)
	b := answer[helloLen:]
	binary.LittleEndian.PutUint32(b[0:], uint32(p.size))
	binary.LittleEndian.PutUint32(b[4:], uint32(p.rank))
	binary.LittleEndian.PutUint32(b[8:], uint32(to))
	binary.LittleEndian.PutUint32(b[12:], uint32(p.slots))
	binary.LittleEndian.PutUint32(b[16:], uint32(p.slotLen))
	b[20] = byte(len(p.runID))
	copy(b[21:], p.runID)
	copy(answer[answerBody:], p.mac(labelDialer, hello, answer[:answerBody]))
	if _, err := c.Write(answer); err != nil {
		return err
	}
	var status [1]byte
	if _, err := io.ReadFull(c, status[:]); err != nil {
		return fmt.Errorf("reading rank %d's verdict: %w", to, err)
	}
	switch status[0] {
	case 0:
		got := make([]byte, macLen)
		if _, err := io.ReadFull(c, got); err != nil {
			return fmt.Errorf("reading rank %d's verdict: %w", to, err)
		}
		if !hmac.Equal(got, p.mac(labelListener, hello, answer)) {
			return fmt.Errorf("%w: rank %d does not know the secret", ErrAuth, to)
		}
		return nil
	case 1:
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return fmt.Errorf("%w: rank %d refused the connection", ErrAuth, to)
		}
		n := int(binary.LittleEndian.Uint16(l[:]))
		if n > maxReason {
			return fmt.Errorf("%w: oversized refusal from rank %d", ErrProtocol, to)
		}
		reason := make([]byte, n)
		if _, err := io.ReadFull(c, reason); err != nil {
			return fmt.Errorf("%w: rank %d refused the connection", ErrAuth, to)
		}
		return fmt.Errorf("%w: rank %d refused the connection: %s", ErrAuth, to, untrusted.Printable(reason))
	}
	return fmt.Errorf("%w: bad verdict byte %d from rank %d", ErrProtocol, status[0], to)
}
