package handshake

import (
	"errors"
	"fmt"
	"io"

	"github.com/ringddp/ringddp/internal/untrusted"
)

// HelloLen is the length of an Exchange's hello, which also starts its
// answer.
const HelloLen = PrefixLen + NonceLen

// Exchange is the three-message handshake of the rendezvous store and the
// shm transport. The listener speaks first:
//
//	listener → dialer  hello    prefix(mode, 0) | nonceL [32]
//	dialer → listener  answer   prefix(mode, 0) | nonceD [32] | body | macD [32]
//	listener → dialer  verdict  0 | macL [32]           accepted
//	                            1 | len u16 | reason    refused (len ≤ MaxReason)
//
//	macD = HMAC-SHA256(secret, DialerLabel | hello | answer without macD)
//	macL = HMAC-SHA256(secret, ListenerLabel | hello | answer)
//
// The dialer proves the secret first, over the listener's nonce; the
// listener checks the answer's prefix and then its MAC before it looks at
// the body (the caller's to judge), and sends macL, the only value it
// computes with the secret, after both. macL covers the whole exchange,
// macD included. The body is what the protocol adds (the shm transport's
// world and ring geometry; nothing for the store).
type Exchange struct {
	Protocol
	// Name is the protocol in errors: "store" in "does not speak the
	// ringddp store protocol".
	Name string
	// Secret is the shared secret; Mode is ModeHMAC or ModeInsecure.
	Secret []byte
	Mode   byte
	// DialerLabel and ListenerLabel start macD and macL.
	DialerLabel, ListenerLabel []byte
	// ErrProtocol and ErrAuth are what the errors wrap: a peer that does
	// not speak the protocol as this side does, or a failed
	// authentication.
	ErrProtocol, ErrAuth error
	// ModeError words a mode mismatch: who runs in mode peer, this side
	// in mode own. nil: "<who> is <mode>, this side is <mode>".
	ModeError func(who string, peer, own byte) string
	// Rand is the source of nonces; nil: crypto/rand.
	Rand io.Reader
}

// Answer is a dialer's answer that proved the secret; the listener judges
// its body, then calls Accept or Exchange.Refuse.
type Answer struct {
	x            *Exchange
	hello, whole []byte
}

// Body is the answer's body.
func (a *Answer) Body() []byte { return a.whole[HelloLen : len(a.whole)-MACLen] }

// Key is the connection's session key under label, once the listener has
// accepted the dialer (Exchange.SessionKey).
func (a *Answer) Key(label []byte) [KeyLen]byte { return a.x.SessionKey(label, a.hello, a.whole) }

// Accept sends the verdict that admits the dialer: 0 | macL.
func (a *Answer) Accept(w io.Writer) error {
	verdict := make([]byte, 1, 1+MACLen)
	verdict = append(verdict, MAC(a.x.Secret, a.x.ListenerLabel, a.hello, a.whole)...)
	_, err := w.Write(verdict)
	return err
}

// Refuse tells the peer why it is refused (1 | len | reason, reason cut to
// MaxReason bytes); best effort.
func (x *Exchange) Refuse(w io.Writer, reason string) {
	_, _ = w.Write(x.AppendReason([]byte{1}, reason))
}

func (x *Exchange) putHello(b []byte) error {
	x.PutPrefix(b, x.Mode, 0)
	return Nonce(x.Rand, b[PrefixLen:HelloLen])
}

// checkHello checks the prefix of a hello or an answer from who.
func (x *Exchange) checkHello(b []byte, who string) error {
	mode, _, err := x.CheckPrefix(b)
	var ve *VersionError
	if errors.As(err, &ve) {
		return fmt.Errorf("%w: %s speaks %s protocol version %d, this build version %d", x.ErrProtocol, who, x.Name, ve.Peer, ve.Own)
	}
	if err != nil {
		return fmt.Errorf("%w: %s does not speak the ringddp %s protocol", x.ErrProtocol, who, x.Name)
	}
	if mode != x.Mode {
		if x.ModeError != nil {
			return fmt.Errorf("%w: %s", x.ErrAuth, x.ModeError(who, mode, x.Mode))
		}
		return fmt.Errorf("%w: %s is %s, this side is %s", x.ErrAuth, who, ModeName(mode), ModeName(x.Mode))
	}
	return nil
}

// Listen runs the listener's side up to the verdict: it sends the hello,
// reads an answer with a body of bodyLen bytes from who ("client", "the
// dialer"), and checks its prefix and then its MAC, refusing the dialer
// (with rejection, if the MAC fails) when either is wrong. The caller has
// set a deadline.
func (x *Exchange) Listen(c io.ReadWriter, bodyLen int, who, rejection string) (*Answer, error) {
	a := &Answer{x: x, hello: make([]byte, HelloLen), whole: make([]byte, HelloLen+bodyLen+MACLen)}
	if err := x.putHello(a.hello); err != nil {
		return nil, err
	}
	if _, err := c.Write(a.hello); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(c, a.whole); err != nil {
		return nil, err
	}
	if err := x.checkHello(a.whole, who); err != nil {
		x.Refuse(c, err.Error())
		return nil, err
	}
	signed := len(a.whole) - MACLen
	if !Verify(a.whole[signed:], x.Secret, x.DialerLabel, a.hello, a.whole[:signed]) {
		x.Refuse(c, rejection)
		return nil, fmt.Errorf("%w: %s does not know the secret", x.ErrAuth, who)
	}
	return a, nil
}

// Peer names the listener in a dialer's errors.
type Peer struct {
	// Name is the listener as a subject: "server", "rank 3".
	Name string
	// Of is the listener before what it sends: "server" (hello),
	// "rank 3's" (hello).
	Of string
	// NoSecret says that the listener's MAC failed.
	NoSecret string
}

// Dial runs the dialer's side: it reads the hello, answers with body and
// its MAC, and reads the verdict, whose MAC it checks. The caller has set
// a deadline.
func (x *Exchange) Dial(c io.ReadWriter, body []byte, peer Peer) error {
	_, _, err := x.dial(c, body, peer)
	return err
}

// DialKey is Dial, and returns the connection's session key under label
// (SessionKey).
func (x *Exchange) DialKey(c io.ReadWriter, body []byte, peer Peer, label []byte) ([KeyLen]byte, error) {
	hello, answer, err := x.dial(c, body, peer)
	if err != nil {
		return [KeyLen]byte{}, err
	}
	return x.SessionKey(label, hello, answer), nil
}

// KeyLen is the length of a session key, in bytes.
const KeyLen = MACLen

// SessionKey is the session key of the exchange of hello and answer
// (macD included) under label:
//
//	key = HMAC-SHA256(secret, label | hello | answer)
//
// Both sides compute it once the exchange has succeeded, and neither sends
// it; it covers both nonces, so it differs per connection, and the label
// (which must name the protocol and its version) keeps the keys of two
// protocols apart. In insecure mode it is keyed by the empty secret and
// protects nothing.
func (x *Exchange) SessionKey(label, hello, answer []byte) [KeyLen]byte {
	var k [KeyLen]byte
	copy(k[:], MAC(x.Secret, label, hello, answer))
	return k
}

// dial is Dial, returning the hello and the answer sent.
func (x *Exchange) dial(c io.ReadWriter, body []byte, peer Peer) (hello, answer []byte, err error) {
	hello = make([]byte, HelloLen)
	if _, err := io.ReadFull(c, hello); err != nil {
		return nil, nil, fmt.Errorf("reading %s hello: %w", peer.Of, err)
	}
	if err := x.checkHello(hello, peer.Name); err != nil {
		return nil, nil, err
	}
	answer = make([]byte, HelloLen, HelloLen+len(body)+MACLen)
	if err := x.putHello(answer); err != nil {
		return nil, nil, err
	}
	answer = append(answer, body...)
	answer = append(answer, MAC(x.Secret, x.DialerLabel, hello, answer)...)
	if _, err := c.Write(answer); err != nil {
		return nil, nil, err
	}
	var status [1]byte
	if _, err := io.ReadFull(c, status[:]); err != nil {
		return nil, nil, fmt.Errorf("reading %s verdict: %w", peer.Of, err)
	}
	switch status[0] {
	case 0:
		got := make([]byte, MACLen)
		if _, err := io.ReadFull(c, got); err != nil {
			return nil, nil, fmt.Errorf("reading %s verdict: %w", peer.Of, err)
		}
		if !Verify(got, x.Secret, x.ListenerLabel, hello, answer) {
			return nil, nil, fmt.Errorf("%w: %s", x.ErrAuth, peer.NoSecret)
		}
		return hello, answer, nil
	case 1:
		return nil, nil, x.refused(c, peer.Name)
	}
	return nil, nil, fmt.Errorf("%w: bad verdict byte %d from %s", x.ErrProtocol, status[0], peer.Name)
}

// refused reads the reason of a refusal from peer.
func (x *Exchange) refused(r io.Reader, peer string) error {
	reason, err := x.ReadReason(r)
	switch {
	case err == nil:
		return fmt.Errorf("%w: %s refused the connection: %s", x.ErrAuth, peer, untrusted.Printable(reason))
	case errors.Is(err, ErrForeign):
		return fmt.Errorf("%w: oversized refusal from %s", x.ErrProtocol, peer)
	}
	return fmt.Errorf("%w: %s refused the connection", x.ErrAuth, peer)
}
