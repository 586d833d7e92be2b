package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/ringddp/ringddp/internal/untrusted"
)

// The handshake on every data connection. The higher rank dials the lower
// one (rank r dials 0..r-1 and accepts r+1..N-1). Every message starts with
// an 8-byte prefix: magic "RDDH" u32 | version u16 | type u8 | mode u8
// (mode 1: shared secret, 0: explicitly insecure). Then, big-endian:
//
//	D → A  hello      size u32 | from u32 | to u32 | nonceD [32] | runLen u8 | runID
//	A → D  challenge  size u32 | rank u32 | nonceA [32] | macA [32]
//	D → A  proof      status u8 | len u16 | reason | macD [32]
//	A → D  verdict    status u8 | len u16 | reason
//
//	macA = HMAC-SHA256(secret, "ringddp/tcp/acceptor\x00" | hello | challenge without macA)
//	macD = HMAC-SHA256(secret, "ringddp/tcp/dialer\x00" | hello | challenge | proof without macD)
//
// Either side may instead answer with a refusal (type 5: len u16 | reason)
// and close: for another protocol version or mode, or a failed proof.
// After both proofs check, the two sides compare world size, ranks and run
// id; a disagreement between authenticated ranks is fatal to both (the
// dialer says so in its proof, the acceptor in its verdict). A connection
// that does not start with the magic is dropped silently; a refusal of an
// unauthenticated peer is noted and the acceptor goes on listening, so
// that strangers cannot stop a job, but reports the note if the mesh is not
// complete in time.
const (
	hsMagic         = 0x52444448 // "RDDH"
	ProtocolVersion = 2          // the wire protocol version of this package (2: abort frames carry a mismatch record)

	hsHello     = 1
	hsChallenge = 2
	hsProof     = 3
	hsVerdict   = 4
	hsRefuse    = 5

	modeInsecure = 0
	modeHMAC     = 1

	prefixLen    = 8
	nonceLen     = 32
	macLen       = sha256.Size
	maxRunID     = 255
	maxReasonLen = 512
	helloFixed   = prefixLen + 12 + nonceLen + 1
	challengeLen = prefixLen + 8 + nonceLen + macLen
)

var (
	labelAcceptor = []byte("ringddp/tcp/acceptor\x00")
	labelDialer   = []byte("ringddp/tcp/dialer\x00")
)

// errGarbage: the peer does not speak this protocol at all.
var errGarbage = errors.New("not a ringddp connection")

// versionError: the peer speaks another version of this protocol.
type versionError struct{ peer uint16 }

func (e *versionError) Error() string {
	return fmt.Sprintf("protocol version mismatch: the peer speaks version %d, this rank version %d", e.peer, ProtocolVersion)
}

func hsMAC(secret, label []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(label)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

func putPrefix(b []byte, typ, mode byte) {
	binary.BigEndian.PutUint32(b[0:], hsMagic)
	binary.BigEndian.PutUint16(b[4:], ProtocolVersion)
	b[6], b[7] = typ, mode
}

// readPrefix reads a message prefix and returns its type and mode.
func readPrefix(r io.Reader, b []byte) (typ, mode byte, err error) {
	if _, err := io.ReadFull(r, b[:prefixLen]); err != nil {
		return 0, 0, err
	}
	if binary.BigEndian.Uint32(b) != hsMagic {
		return 0, 0, errGarbage
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != ProtocolVersion {
		return 0, 0, &versionError{peer: v}
	}
	return b[6], b[7], nil
}

// readReason reads a u16-prefixed reason of at most maxReasonLen bytes,
// as sent (pass it through printable before showing it).
func readReason(r io.Reader) (string, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return "", err
	}
	n := int(binary.BigEndian.Uint16(l[:]))
	if n > maxReasonLen {
		return "", fmt.Errorf("%w: %d-byte reason", errGarbage, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b), nil
}

func appendReason(b []byte, reason string) []byte {
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(reason)))
	return append(b, reason...)
}

// sendRefusal tells the peer why this side hangs up; best effort.
func sendRefusal(w io.Writer, mode byte, reason string) {
	b := make([]byte, prefixLen, prefixLen+2+len(reason))
	putPrefix(b, hsRefuse, mode)
	_, _ = w.Write(appendReason(b, reason))
}

func modeName(m byte) string {
	if m == modeInsecure {
		return "insecure (no secret)"
	}
	return "authenticated (shared secret)"
}

func newNonce() []byte {
	n := make([]byte, nonceLen)
	_, _ = rand.Read(n) // crypto/rand.Read does not fail
	return n
}

// handshakeParams is what one side brings to a handshake.
type handshakeParams struct {
	secret []byte
	mode   byte
	size   int
	rank   int
	runID  string
}

// dialHandshake runs the dialer's side with the rank expected at nc.
// fatal reports an answer that retrying cannot change.
func dialHandshake(nc net.Conn, p *handshakeParams, to int) (fatal bool, err error) {
	hello := make([]byte, helloFixed, helloFixed+len(p.runID))
	putPrefix(hello, hsHello, p.mode)
	binary.BigEndian.PutUint32(hello[8:], uint32(p.size))
	binary.BigEndian.PutUint32(hello[12:], uint32(p.rank))
	binary.BigEndian.PutUint32(hello[16:], uint32(to))
	copy(hello[20:], newNonce())
	hello[20+nonceLen] = byte(len(p.runID))
	hello = append(hello, p.runID...)
	if _, err := nc.Write(hello); err != nil {
		return false, err
	}
	ch := make([]byte, challengeLen)
	typ, mode, err := readPrefix(nc, ch)
	switch {
	case errors.Is(err, errGarbage):
		return true, fmt.Errorf("the listener is not a ringddp rank (wrong address?)")
	case err != nil:
		var ve *versionError
		return errors.As(err, &ve), err
	case typ == hsRefuse:
		reason, rerr := readReason(nc)
		if rerr != nil {
			return false, rerr
		}
		return true, fmt.Errorf("refused: %s", untrusted.Printable([]byte(reason)))
	case typ != hsChallenge:
		return true, fmt.Errorf("%w: handshake message type %d, want a challenge", errGarbage, typ)
	case mode != p.mode:
		return true, fmt.Errorf("the peer is %s, this rank is %s", modeName(mode), modeName(p.mode))
	}
	if _, err := io.ReadFull(nc, ch[prefixLen:]); err != nil {
		return false, err
	}
	if !hmac.Equal(ch[challengeLen-macLen:], hsMAC(p.secret, labelAcceptor, hello, ch[:challengeLen-macLen])) {
		sendRefusal(nc, p.mode, fmt.Sprintf("authentication failed: rank %d does not accept this rank's secret", p.rank))
		return true, fmt.Errorf("authentication failed: the peer does not know this job's secret (RINGDDP_SECRET differs?)")
	}
	// Authenticated: what the peer says can be believed.
	peerSize, peerRank := int(binary.BigEndian.Uint32(ch[8:])), int(binary.BigEndian.Uint32(ch[12:]))
	var problem string
	switch {
	case peerSize != p.size:
		problem = fmt.Sprintf("world size mismatch: rank %d has world size %d, rank %d has %d", peerRank, peerSize, p.rank, p.size)
	case peerRank != to:
		problem = fmt.Sprintf("rank mismatch: rank %d dialed rank %d's address but reached rank %d", p.rank, to, peerRank)
	}
	proof := make([]byte, prefixLen+1, prefixLen+3+len(problem)+macLen)
	putPrefix(proof, hsProof, p.mode)
	if problem != "" {
		proof[prefixLen] = 1
	}
	proof = appendReason(proof, problem)
	proof = append(proof, hsMAC(p.secret, labelDialer, hello, ch, proof)...)
	if _, err := nc.Write(proof); err != nil {
		return problem != "", err
	}
	if problem != "" {
		return true, errors.New(problem)
	}
	typ, _, err = readPrefix(nc, ch)
	if err != nil {
		return false, err
	}
	switch typ {
	case hsVerdict:
		var st [1]byte
		if _, err := io.ReadFull(nc, st[:]); err != nil {
			return false, err
		}
		reason, err := readReason(nc)
		if err != nil {
			return false, err
		}
		if st[0] != 0 {
			return true, errors.New(untrusted.Printable([]byte(reason)))
		}
		return false, nil
	case hsRefuse:
		reason, err := readReason(nc)
		if err != nil {
			return false, err
		}
		return true, fmt.Errorf("refused: %s", untrusted.Printable([]byte(reason)))
	}
	return true, fmt.Errorf("%w: handshake message type %d, want a verdict", errGarbage, typ)
}

// acceptOutcome classifies a failed acceptance.
type acceptOutcome int

const (
	acceptOK     acceptOutcome = iota
	acceptIgnore               // not our protocol, or the connection broke: forget it
	acceptNote                 // an unauthenticated refusal: keep listening, remember why
	acceptFatal                // an authenticated rank disagrees: the mesh cannot form
)

// acceptHandshake runs the acceptor's side. admit is called once the
// dialer is authenticated and agrees on size and run id; it returns why
// the rank cannot join (out of range, duplicate), or "" to admit it, in
// which case release undoes the admission if the verdict cannot be sent.
func acceptHandshake(nc net.Conn, p *handshakeParams, admit func(from int) string, release func(from int)) (from int, out acceptOutcome, err error) {
	hello := make([]byte, helloFixed+maxRunID)
	typ, mode, err := readPrefix(nc, hello)
	if err != nil {
		var ve *versionError
		if errors.As(err, &ve) {
			sendRefusal(nc, p.mode, fmt.Sprintf("rank %d speaks protocol version %d, not %d", p.rank, ProtocolVersion, ve.peer))
			return -1, acceptNote, err
		}
		return -1, acceptIgnore, err
	}
	if typ != hsHello {
		return -1, acceptIgnore, fmt.Errorf("%w: handshake message type %d, want a hello", errGarbage, typ)
	}
	if _, err := io.ReadFull(nc, hello[prefixLen:helloFixed]); err != nil {
		return -1, acceptIgnore, err
	}
	runLen := int(hello[helloFixed-1])
	if _, err := io.ReadFull(nc, hello[helloFixed:helloFixed+runLen]); err != nil {
		return -1, acceptIgnore, err
	}
	hello = hello[:helloFixed+runLen]
	size := int(binary.BigEndian.Uint32(hello[8:]))
	from = int(binary.BigEndian.Uint32(hello[12:]))
	to := int(binary.BigEndian.Uint32(hello[16:]))
	runID := string(hello[helloFixed:])
	if mode != p.mode {
		sendRefusal(nc, p.mode, fmt.Sprintf("rank %d is %s, the dialer is %s", p.rank, modeName(p.mode), modeName(mode)))
		return from, acceptNote, fmt.Errorf("the peer is %s, this rank is %s", modeName(mode), modeName(p.mode))
	}
	ch := make([]byte, challengeLen-macLen, challengeLen)
	putPrefix(ch, hsChallenge, p.mode)
	binary.BigEndian.PutUint32(ch[8:], uint32(p.size))
	binary.BigEndian.PutUint32(ch[12:], uint32(p.rank))
	copy(ch[16:], newNonce())
	ch = append(ch, hsMAC(p.secret, labelAcceptor, hello, ch)...)
	if _, err := nc.Write(ch); err != nil {
		return from, acceptIgnore, err
	}
	buf := make([]byte, prefixLen+1)
	typ, _, err = readPrefix(nc, buf)
	if err != nil {
		return from, acceptIgnore, err
	}
	switch typ {
	case hsRefuse:
		reason, err := readReason(nc)
		if err != nil {
			return from, acceptIgnore, err
		}
		return from, acceptNote, fmt.Errorf("refused by the dialer: %s", untrusted.Printable([]byte(reason)))
	case hsProof:
	default:
		return from, acceptIgnore, fmt.Errorf("%w: handshake message type %d, want a proof", errGarbage, typ)
	}
	if _, err := io.ReadFull(nc, buf[prefixLen:]); err != nil {
		return from, acceptIgnore, err
	}
	reason, err := readReason(nc)
	if err != nil {
		return from, acceptIgnore, err
	}
	proof := appendReason(buf[:prefixLen+1:prefixLen+1], reason)
	got := make([]byte, macLen)
	if _, err := io.ReadFull(nc, got); err != nil {
		return from, acceptIgnore, err
	}
	if !hmac.Equal(got, hsMAC(p.secret, labelDialer, hello, ch, proof)) {
		sendRefusal(nc, p.mode, fmt.Sprintf("authentication failed: rank %d does not accept the dialer's secret", p.rank))
		return from, acceptNote, fmt.Errorf("authentication failed: the dialer does not know this job's secret (RINGDDP_SECRET differs?)")
	}
	// Authenticated.
	if buf[prefixLen] != 0 {
		return from, acceptFatal, fmt.Errorf("rank %d refused this rank: %s", from, untrusted.Printable([]byte(reason)))
	}
	var problem string
	switch {
	case size != p.size:
		problem = fmt.Sprintf("world size mismatch: rank %d has world size %d, rank %d has %d", from, size, p.rank, p.size)
	case runID != p.runID:
		problem = fmt.Sprintf("run id mismatch: rank %d is in run %q, rank %d in run %q", from, untrusted.Printable([]byte(runID)), p.rank, p.runID)
	case to != p.rank:
		problem = fmt.Sprintf("rank mismatch: rank %d dialed rank %d but reached rank %d", from, to, p.rank)
	default:
		problem = admit(from)
	}
	verdict := make([]byte, prefixLen+1, prefixLen+3+len(problem))
	putPrefix(verdict, hsVerdict, p.mode)
	if problem != "" {
		verdict[prefixLen] = 1
	}
	verdict = appendReason(verdict, problem)
	if _, err := nc.Write(verdict); err != nil {
		if problem == "" {
			release(from)
		}
		return from, acceptIgnore, err
	}
	if problem != "" {
		return from, acceptFatal, errors.New(problem)
	}
	return from, acceptOK, nil
}
