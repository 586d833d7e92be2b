package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ringddp/ringddp/internal/untrusted"

	"github.com/ringddp/ringddp/allreduce/internal/handshake"
	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
)

// The handshake on every data connection, protocol version 4. The higher
// rank (the dialer, D) dials the lower one (the acceptor, A): rank r dials
// 0..r-1 and accepts r+1..N-1. Every message starts with an 8-byte prefix:
// magic "RDDH" u32 | version u16 | type u8 | mode u8 (mode 1: shared
// secret, 0: explicitly insecure). Then, big-endian:
//
//	D → A  hello      size u32 | from u32 | to u32 | wire u8 | link u8 | view [16] |
//	                  nonceD [32] | runLen u8 | runID
//	A → D  challenge  nonceA [32]
//	D → A  proof      macD [32]
//	A → D  verdict    size u32 | rank u32 | link u8 | status u8 | len u16 | reason | macA [32]
//
//	macD = HMAC-SHA256(secret, "ringddp/tcp/v4/dialer\x00" | hello | challenge | proof prefix)
//	macA = HMAC-SHA256(secret, "ringddp/tcp/v4/acceptor\x00" | hello | challenge | proof | verdict without macA)
//
// (each message whole, prefix included). The dialer proves the secret
// first; the acceptor sends nothing computed with the secret (macA) until
// that proof has checked, so a stranger who connects obtains no value to
// test guesses of the secret against. Both MACs cover both fresh nonces
// and every field either side sent, so no answer can be replayed,
// reflected (the labels differ), spliced from another connection or
// downgraded (the version is in every prefix and refused when it differs);
// MACs are compared in constant time. wire is the dialer's configured
// wire protection (0 none, 1 mac, 2 aead, 3 auto); link is the protection
// it resolved for this link (auto resolved by sameHost: none within a
// host, mac between hosts), and view the peer address it sees (IPv6
// form), which names its view in errors. Each end resolves auto from its
// own socket's addresses, so a relay or NAT that shows one end a loopback
// peer and the other a remote one would make them disagree, and could
// then strip the tags of one direction; binding link into both MACs, and
// refusing a disagreement, closes that. The acceptor alone judges the
// dialer's world size, run id, target rank, wire protection and link
// protection, which must equal its own; its verdict, authenticated by
// macA, admits the dialer (status 0) or says why not (status 1; fatal to
// both, since both are authenticated ranks), and carries the acceptor's
// world size, rank and link protection, which the dialer checks too.
//
// Either side may instead answer with a refusal (type 5: len u16 | reason)
// and close: for another protocol version or mode, or (the acceptor) a
// failed proof. A refusal sent before the peer proved the secret names
// neither rank nor anything else about the job beyond the protocol
// version and mode it speaks. The version is checked, in every message, before anything
// else is read: a peer of another version is refused with both versions
// named. A connection that does not start with the magic is dropped
// silently; a refusal of an unauthenticated peer is noted and the acceptor
// goes on listening, so that strangers cannot stop a job, and reports the
// note if the mesh is not complete in time.
//
// Both ends then derive the link's 32-byte session key (wireKey):
//
//	key = HMAC-SHA256(secret, "ringddp wire key v1\x00" | nonceD | nonceA | from u32 | to u32 | runLen u8 | runID)
//
// with from, to and runID as sent in the hello (from: the dialer's rank,
// to: the acceptor's). It differs per link and per connection (fresh
// nonces) and is never sent. In insecure mode the key is all zeros.
//
// The prefix, the MACs, the nonces and the reasons are package
// handshake's, shared with the store and the shm transport.
const (
	hsMagic = 0x52444448 // "RDDH"
	// ProtocolVersion is the wire protocol version of this package (2:
	// abort frames carry a mismatch record; 3: the dialer proves the secret
	// first, and the handshake yields a session key; 4: both ends bind the
	// link's resolved wire protection into the handshake).
	ProtocolVersion = 4

	hsHello     = 1
	hsChallenge = 2
	hsProof     = 3
	hsVerdict   = 4
	hsRefuse    = 5

	modeInsecure = handshake.ModeInsecure
	modeHMAC     = handshake.ModeHMAC

	prefixLen    = handshake.PrefixLen
	nonceLen     = handshake.NonceLen
	macLen       = handshake.MACLen
	maxRunID     = mpconn.MaxRunID // the hello carries its length in a byte
	maxReasonLen = 512
	viewLen      = net.IPv6len
	helloWire    = prefixLen + 12 // where wire, link and view are in the hello
	helloNonce   = helloWire + 2 + viewLen
	helloFixed   = helloNonce + nonceLen + 1
	challengeLen = prefixLen + nonceLen
	proofLen     = prefixLen + macLen
	verdictLink  = prefixLen + 8   // where link is in the verdict
	verdictFixed = verdictLink + 2 // up to and excluding the reason's length
)

const (
	labelAcceptor = "ringddp/tcp/v4/acceptor\x00"
	labelDialer   = "ringddp/tcp/v4/dialer\x00"
	labelWireKey  = "ringddp wire key v1\x00"
)

// errGarbage: the peer does not speak this protocol at all.
var errGarbage = handshake.ErrForeign

// versionError: the peer speaks another version of this protocol.
type versionError = handshake.VersionError

// hsProto is this protocol's prefix and reasons.
func hsProto() *handshake.Protocol {
	return &handshake.Protocol{Magic: hsMagic, Version: ProtocolVersion, Order: binary.BigEndian, MaxReason: maxReasonLen}
}

// hsMAC is HMAC-SHA256(secret, label | parts...).
func hsMAC(secret []byte, label string, parts ...[]byte) []byte {
	return handshake.MAC(secret, []byte(label), parts...)
}

// deriveKey is a link's session key (see the handshake above); hello is
// the dialer's hello, whole.
func deriveKey(p *handshakeParams, hello, nonceA []byte) wireKey {
	var k wireKey
	if p.mode == modeInsecure {
		return k
	}
	nonceD := hello[helloNonce : helloNonce+nonceLen]
	ranks := hello[12:20] // from u32 | to u32
	run := hello[helloFixed-1:]
	copy(k[:], hsMAC(p.secret, labelWireKey, nonceD, nonceA, ranks, run))
	return k
}

func putPrefix(b []byte, typ, mode byte) { hsProto().PutPrefix(b, typ, mode) }

// readPrefix reads a message prefix into b and returns its type and mode.
// The magic and then the version are checked before anything else.
func readPrefix(r io.Reader, b []byte) (typ, mode byte, err error) {
	return hsProto().ReadPrefix(r, b)
}

// readReason reads a u16-prefixed reason of at most maxReasonLen bytes,
// as sent (pass it through printable before showing it).
func readReason(r io.Reader) (string, error) {
	b, err := hsProto().ReadReason(r)
	return string(b), err
}

func appendReason(b []byte, reason string) []byte { return hsProto().AppendReason(b, reason) }

// sendRefusal tells the peer why this side hangs up; best effort.
func sendRefusal(w io.Writer, mode byte, reason string) {
	b := make([]byte, prefixLen, prefixLen+2+len(reason))
	putPrefix(b, hsRefuse, mode)
	_, _ = w.Write(appendReason(b, reason))
}

// handshakeParams is what one side brings to a handshake.
type handshakeParams struct {
	secret []byte
	mode   byte
	size   int
	rank   int
	runID  string
	wire   byte      // wireCode(Config.WireProtection)
	rand   io.Reader // nonces; nil: crypto/rand
	// same decides whether a connection stays on one host, to resolve
	// auto (nil: sameHost).
	same func(local, remote net.Addr) bool
	// verdictBy is how long a dialer waits for the verdict once its proof
	// is sent (the mesh's formation deadline; zero: the connection's
	// deadline as the caller set it). The acceptor claims the dialer's
	// rank when it sends an admitting verdict, so a dialer that gave up
	// just before reading it (its handshake deadline began earlier than
	// the acceptor's) would redial into a closed listener or be refused as
	// a duplicate of itself; waiting for the verdict closes that window.
	verdictBy time.Time
}

// linkView is one end's view of a link: the protection it resolved for
// it and the peer address it sees.
type linkView struct {
	mode WireProtection
	peer net.IP // 16 bytes; zeros when the peer is not a TCP address
}

// viewOf resolves the configured wire protection for the link over nc.
func (p *handshakeParams) viewOf(nc net.Conn) linkView {
	same := p.same
	if same == nil {
		same = sameHost
	}
	v := linkView{mode: WireProtection(wireName(p.wire)).forLink(same(nc.LocalAddr(), nc.RemoteAddr())), peer: make(net.IP, viewLen)}
	if ra, ok := nc.RemoteAddr().(*net.TCPAddr); ok && ra.IP.To16() != nil {
		copy(v.peer, ra.IP.To16())
	}
	return v
}

// describe is a rank's view of a link in a disagreement: "rank 0
// resolved -wire-protection auto to mac for this link (peer 10.0.0.2
// looks remote)".
func (v linkView) describe(rank int, configured byte) string {
	looks := "remote"
	if v.mode == WireNone {
		looks = "local"
	}
	return fmt.Sprintf("rank %d resolved -wire-protection %s to %s for this link (peer %v looks %s)", rank, wireName(configured), v.mode, v.peer, looks)
}

// session is what a completed handshake gives the link: its session key
// and the wire protection both ends agreed on.
type session struct {
	key  wireKey
	mode WireProtection
}

// wireCode is a wire protection mode's code in the hello.
func wireCode(w WireProtection) byte {
	switch w {
	case WireNone:
		return 0
	case WireMAC:
		return 1
	case WireAEAD:
		return 2
	case WireAuto:
		return 3
	}
	return 0xff
}

func wireName(code byte) string {
	switch code {
	case 0:
		return string(WireNone)
	case 1:
		return string(WireMAC)
	case 2:
		return string(WireAEAD)
	case 3:
		return string(WireAuto)
	}
	return fmt.Sprintf("unknown (%d)", code)
}

func (p *handshakeParams) nonce(b []byte) error { return handshake.Nonce(p.rand, b) }

// dialHandshake runs the dialer's side with the rank expected at nc and
// returns the link's session. fatal reports an answer that retrying
// cannot change.
func dialHandshake(nc net.Conn, p *handshakeParams, to int) (s session, fatal bool, err error) {
	view := p.viewOf(nc)
	hello := make([]byte, helloFixed, helloFixed+len(p.runID))
	putPrefix(hello, hsHello, p.mode)
	binary.BigEndian.PutUint32(hello[8:], uint32(p.size))
	binary.BigEndian.PutUint32(hello[12:], uint32(p.rank))
	binary.BigEndian.PutUint32(hello[16:], uint32(to))
	hello[helloWire], hello[helloWire+1] = p.wire, wireCode(view.mode)
	copy(hello[helloWire+2:helloNonce], view.peer)
	if err := p.nonce(hello[helloNonce : helloNonce+nonceLen]); err != nil {
		return s, true, err
	}
	hello[helloFixed-1] = byte(len(p.runID))
	hello = append(hello, p.runID...)
	if _, err := nc.Write(hello); err != nil {
		return s, false, err
	}

	ch := make([]byte, challengeLen)
	typ, mode, err := readPrefix(nc, ch)
	if fatal, err := dialerPrefixErr(nc, typ, mode, err, p, hsChallenge, "a challenge"); err != nil {
		return s, fatal, err
	}
	if _, err := io.ReadFull(nc, ch[prefixLen:]); err != nil {
		return s, false, err
	}

	proof := make([]byte, prefixLen, proofLen)
	putPrefix(proof, hsProof, p.mode)
	proof = append(proof, hsMAC(p.secret, labelDialer, hello, ch, proof)...)
	if _, err := nc.Write(proof); err != nil {
		return s, false, err
	}
	if !p.verdictBy.IsZero() {
		_ = nc.SetReadDeadline(p.verdictBy)
	}

	verdict := make([]byte, verdictFixed, verdictFixed+2+maxReasonLen+macLen)
	typ, mode, err = readPrefix(nc, verdict)
	if fatal, err := dialerPrefixErr(nc, typ, mode, err, p, hsVerdict, "a verdict"); err != nil {
		return s, fatal, err
	}
	if _, err := io.ReadFull(nc, verdict[prefixLen:]); err != nil {
		return s, false, err
	}
	reason, err := readReason(nc)
	if err != nil {
		return s, errors.Is(err, errGarbage), err
	}
	verdict = appendReason(verdict, reason)
	got := make([]byte, macLen)
	if _, err := io.ReadFull(nc, got); err != nil {
		return s, false, err
	}
	if !handshake.Verify(got, p.secret, []byte(labelAcceptor), hello, ch, proof, verdict) {
		return s, true, fmt.Errorf("authentication failed: the peer does not know this job's secret (RINGDDP_SECRET differs?)")
	}
	// Authenticated: what the peer says can be believed.
	if verdict[verdictLink+1] != 0 {
		return s, true, errors.New(untrusted.Printable([]byte(reason)))
	}
	peerSize, peerRank := int(binary.BigEndian.Uint32(verdict[8:])), int(binary.BigEndian.Uint32(verdict[12:]))
	switch peerLink := verdict[verdictLink]; {
	case peerSize != p.size:
		return s, true, fmt.Errorf("world size mismatch: rank %d has world size %d, rank %d has %d", peerRank, peerSize, p.rank, p.size)
	case peerRank != to:
		return s, true, fmt.Errorf("rank mismatch: rank %d dialed rank %d's address but reached rank %d", p.rank, to, peerRank)
	case peerLink != wireCode(view.mode):
		return s, true, fmt.Errorf("wire protection disagreement: rank %d resolved -wire-protection %s to %s for this link but %s (set -wire-protection mac or aead on every rank)",
			peerRank, wireName(p.wire), wireName(peerLink), view.describe(p.rank, p.wire))
	}
	return session{key: deriveKey(p, hello, ch[prefixLen:]), mode: view.mode}, false, nil
}

// dialerPrefixErr judges the prefix of the acceptor's next message, which
// should be of type want: a refusal is read and returned, as is anything
// unexpected. It returns a nil error when the message is the one wanted.
func dialerPrefixErr(nc net.Conn, typ, mode byte, err error, p *handshakeParams, want byte, wantName string) (fatal bool, _ error) {
	var ve *versionError
	switch {
	case errors.Is(err, errGarbage):
		return true, fmt.Errorf("the listener is not a ringddp rank (wrong address?)")
	case errors.As(err, &ve):
		return true, err
	case err != nil:
		return false, err
	case typ == hsRefuse:
		reason, rerr := readReason(nc)
		if rerr != nil {
			return errors.Is(rerr, errGarbage), rerr
		}
		return true, fmt.Errorf("refused: %s", untrusted.Printable([]byte(reason)))
	case typ != want:
		return true, fmt.Errorf("%w: handshake message type %d, want %s", errGarbage, typ, wantName)
	case mode != p.mode:
		return true, fmt.Errorf("the peer is %s, this rank is %s", handshake.ModeName(mode), handshake.ModeName(p.mode))
	}
	return false, nil
}

// acceptOutcome classifies a failed acceptance.
type acceptOutcome int

const (
	acceptOK     acceptOutcome = iota
	acceptIgnore               // not our protocol, or the connection broke: forget it
	acceptNote                 // an unauthenticated refusal: keep listening, remember why
	acceptFatal                // an authenticated rank disagrees: the mesh cannot form
)

// acceptHooks connect an acceptance to the listening rank's state.
type acceptHooks struct {
	// spoke is called when the dialer has sent a well-formed hello.
	spoke func()
	// authenticated is called once the dialer has proved the secret; false
	// means the connection was dropped meanwhile, and the handshake ends.
	authenticated func() bool
	// admit is called once the dialer is authenticated and agrees on size,
	// run id and target rank; it returns why the rank cannot join (out of
	// range, duplicate), or "" to admit it, in which case release undoes
	// the admission if the verdict cannot be sent.
	admit   func(from int) string
	release func(from int)
}

// acceptResult is the outcome of an acceptance.
type acceptResult struct {
	from int // the rank the dialer claims, -1 before its hello
	out  acceptOutcome
	// badProof marks a note (acceptNote) for a proof that failed.
	badProof bool
	s        session // the link's session, once accepted
}

// acceptHandshake runs the acceptor's side (see the protocol above).
func acceptHandshake(nc net.Conn, p *handshakeParams, h acceptHooks) (res acceptResult, err error) {
	res.from = -1
	hello, mode, out, err := readHello(nc, p)
	if err != nil {
		res.out = out
		return res, err
	}
	res.out = acceptIgnore
	res.from = int(binary.BigEndian.Uint32(hello[12:]))
	if mode != p.mode {
		sendRefusal(nc, p.mode, fmt.Sprintf("this rank is %s, the dialer is %s", handshake.ModeName(p.mode), handshake.ModeName(mode)))
		res.out = acceptNote
		return res, fmt.Errorf("the peer is %s, this rank is %s", handshake.ModeName(mode), handshake.ModeName(p.mode))
	}
	if h.spoke != nil {
		h.spoke()
	}

	ch := make([]byte, challengeLen)
	putPrefix(ch, hsChallenge, p.mode)
	if err := p.nonce(ch[prefixLen:]); err != nil {
		return res, err
	}
	if _, err := nc.Write(ch); err != nil {
		return res, err
	}

	proof := make([]byte, proofLen)
	typ, _, err := readPrefix(nc, proof)
	if err != nil {
		return res, err
	}
	switch typ {
	case hsRefuse:
		reason, err := readReason(nc)
		if err != nil {
			return res, err
		}
		res.out = acceptNote
		return res, fmt.Errorf("refused by the dialer: %s", untrusted.Printable([]byte(reason)))
	case hsProof:
	default:
		return res, fmt.Errorf("%w: handshake message type %d, want a proof", errGarbage, typ)
	}
	if _, err := io.ReadFull(nc, proof[prefixLen:]); err != nil {
		return res, err
	}
	if !handshake.Verify(proof[prefixLen:], p.secret, []byte(labelDialer), hello, ch, proof[:prefixLen]) {
		sendRefusal(nc, p.mode, "authentication failed: the listening rank does not accept the dialer's secret")
		res.out, res.badProof = acceptNote, true
		return res, fmt.Errorf("authentication failed: the dialer does not know this job's secret (RINGDDP_SECRET differs?)")
	}
	// Authenticated: from here on, what the dialer says can be believed,
	// and the acceptor may send values computed with the secret.
	if h.authenticated != nil && !h.authenticated() {
		return res, errDropped
	}
	from := res.from
	view := p.viewOf(nc)
	problem := judgeHello(p, view, hello, h.admit)
	verdict := make([]byte, verdictFixed, verdictFixed+2+len(problem)+macLen)
	putPrefix(verdict, hsVerdict, p.mode)
	binary.BigEndian.PutUint32(verdict[8:], uint32(p.size))
	binary.BigEndian.PutUint32(verdict[12:], uint32(p.rank))
	verdict[verdictLink] = wireCode(view.mode)
	if problem != "" {
		verdict[verdictLink+1] = 1
	}
	verdict = appendReason(verdict, problem)
	verdict = append(verdict, hsMAC(p.secret, labelAcceptor, hello, ch, proof, verdict)...)
	if _, err := nc.Write(verdict); err != nil {
		if problem == "" {
			h.release(from)
		}
		return res, err
	}
	if problem != "" {
		res.out = acceptFatal
		return res, errors.New(problem)
	}
	res.out, res.s = acceptOK, session{key: deriveKey(p, hello, ch[prefixLen:]), mode: view.mode}
	return res, nil
}

// readHello reads a dialer's hello, whole, and returns it with its mode;
// on failure, out is what the failure is worth to the listening rank.
func readHello(nc net.Conn, p *handshakeParams) (hello []byte, mode byte, out acceptOutcome, err error) {
	hello = make([]byte, helloFixed+maxRunID)
	typ, mode, err := readPrefix(nc, hello)
	var ve *versionError
	switch {
	case errors.As(err, &ve):
		sendRefusal(nc, p.mode, fmt.Sprintf("the listening rank speaks protocol version %d, not %d", ProtocolVersion, ve.Peer))
		return nil, 0, acceptNote, err
	case err != nil:
		return nil, 0, acceptIgnore, err
	case typ != hsHello:
		return nil, 0, acceptIgnore, fmt.Errorf("%w: handshake message type %d, want a hello", errGarbage, typ)
	}
	if _, err := io.ReadFull(nc, hello[prefixLen:helloFixed]); err != nil {
		return nil, 0, acceptIgnore, err
	}
	runLen := int(hello[helloFixed-1])
	if _, err := io.ReadFull(nc, hello[helloFixed:helloFixed+runLen]); err != nil {
		return nil, 0, acceptIgnore, err
	}
	return hello[:helloFixed+runLen], mode, acceptIgnore, nil
}

// judgeHello says why an authenticated dialer, whose hello this is,
// cannot join (its world size, run id, target rank, wire protection or
// link protection differ from this rank's, whose view of the link is view,
// or admit refuses it), or "" to admit it.
func judgeHello(p *handshakeParams, view linkView, hello []byte, admit func(from int) string) string {
	size := int(binary.BigEndian.Uint32(hello[8:]))
	from := int(binary.BigEndian.Uint32(hello[12:]))
	to := int(binary.BigEndian.Uint32(hello[16:]))
	wire, link := hello[helloWire], hello[helloWire+1]
	dialer := linkView{mode: WireProtection(wireName(link)), peer: net.IP(hello[helloWire+2 : helloNonce])}
	runID := string(hello[helloFixed:])
	switch {
	case size != p.size:
		return fmt.Sprintf("world size mismatch: rank %d has world size %d, rank %d has %d", p.rank, p.size, from, size)
	case runID != p.runID:
		return fmt.Sprintf("run id mismatch: rank %d is in run %q, rank %d in run %q", from, untrusted.Printable([]byte(runID)), p.rank, p.runID)
	case to != p.rank:
		return fmt.Sprintf("rank mismatch: rank %d dialed rank %d but reached rank %d", from, to, p.rank)
	case wire != p.wire:
		return fmt.Sprintf("wire protection mismatch: rank %d uses %s, rank %d uses %s (every rank needs the same -wire-protection)",
			p.rank, wireName(p.wire), from, wireName(wire))
	case link != wireCode(view.mode):
		return fmt.Sprintf("wire protection disagreement: %s but %s: a relay, proxy or NAT between them? (set -wire-protection mac or aead on every rank)",
			view.describe(p.rank, p.wire), dialer.describe(from, wire))
	}
	return admit(from)
}

// errDropped: the listening rank dropped the connection before it
// authenticated (it was the oldest of too many waiting).
var errDropped = errors.New("dropped while authenticating")
