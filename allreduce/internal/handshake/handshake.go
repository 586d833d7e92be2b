// Package handshake is the HMAC-SHA256 challenge–response that
// authenticates a connection before anything else crosses it, written
// once for the three protocols that need one: the rendezvous store, the
// tcp transport and the shm transport. (NCCL likewise keeps one socket
// layer, src/misc/socket.cc, for its bootstrap and its transports.)
//
// Vocabulary:
//
//   - A Protocol is what tells one protocol's messages from another's: its
//     magic, its version, its byte order and the longest refusal reason it
//     sends or reads.
//   - The prefix is the 8 bytes a message starts with: magic u32 |
//     version u16 | two bytes the protocol assigns (a message type, a
//     mode). Whoever reads one checks the magic and then the version
//     before anything else.
//   - The mode is 1 (ModeHMAC) when the ranks share a secret and 0
//     (ModeInsecure) when the job explicitly opted out; the two modes refuse
//     each other.
//   - A label starts every MAC's input and names the protocol, the side and
//     the message, so that no MAC can be reflected to its sender or
//     replayed in another protocol.
//   - A nonce is NonceLen fresh random bytes that one side chose: a MAC
//     over the other side's nonce proves the secret now, not in a recorded
//     exchange.
//   - A session key is what both sides derive from a successful Exchange
//     (Exchange.SessionKey: an HMAC over its first two messages, both
//     nonces included, under the secret and a label naming the protocol),
//     never sent: the key the store seals its frames under.
//   - A refusal reason is u16 length | text, at most Protocol.MaxReason
//     bytes; the text is the peer's and must pass through
//     untrusted.Printable before anyone sees it.
//
// The rule every protocol here follows: the side that connects proves the
// secret first, and the side that listens sends nothing computed with the
// secret until that proof has checked, so a stranger who connects obtains
// no value to test guesses of the secret against; what it sends a peer that
// has not proved the secret (a refusal's reason) names versions, modes and
// the peer's role, never a rank or anything else of the job. MACs are
// compared in constant time (Verify). Exchange is the whole three-message handshake of
// the store and the shm transport; the tcp transport's four messages are
// built from the same pieces.
package handshake

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	// NonceLen is the length of a nonce, in bytes.
	NonceLen = 32
	// MACLen is the length of a MAC (HMAC-SHA256), in bytes.
	MACLen = sha256.Size
	// PrefixLen is the length of a message prefix.
	PrefixLen = 8

	// ModeInsecure is the mode of a job without a secret (MACs under an
	// empty key: they prove nothing).
	ModeInsecure byte = 0
	// ModeHMAC is the mode of a job with a shared secret.
	ModeHMAC byte = 1
)

// ErrForeign is what reading a prefix or a refusal returns when the peer
// does not speak the protocol at all: another magic, or a reason longer
// than the protocol allows.
var ErrForeign = errors.New("not a ringddp connection")

// VersionError is what reading a prefix returns when the peer speaks
// another version of the protocol.
type VersionError struct {
	Peer, Own uint16
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("protocol version mismatch: the peer speaks version %d, this rank version %d", e.Peer, e.Own)
}

// ByteOrder is a byte order that also appends (binary.BigEndian,
// binary.LittleEndian).
type ByteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// Protocol is what one protocol supplies to the shared handshake: its
// magic and version (in every prefix), its byte order, and the longest
// refusal reason it sends or accepts.
type Protocol struct {
	Magic     uint32
	Version   uint16
	Order     ByteOrder
	MaxReason int
}

// PutPrefix writes the prefix magic | version | x | y into b[:PrefixLen].
func (p *Protocol) PutPrefix(b []byte, x, y byte) {
	p.Order.PutUint32(b[0:], p.Magic)
	p.Order.PutUint16(b[4:], p.Version)
	b[6], b[7] = x, y
}

// CheckPrefix checks the magic and then the version of the prefix in
// b[:PrefixLen]: ErrForeign for another magic, a *VersionError for another
// version. It returns the prefix's last two bytes.
func (p *Protocol) CheckPrefix(b []byte) (x, y byte, err error) {
	if p.Order.Uint32(b) != p.Magic {
		return 0, 0, ErrForeign
	}
	if v := p.Order.Uint16(b[4:]); v != p.Version {
		return 0, 0, &VersionError{Peer: v, Own: p.Version}
	}
	return b[6], b[7], nil
}

// ReadPrefix reads a prefix into b[:PrefixLen] and checks it
// (CheckPrefix): nothing more is read from a peer of another protocol or
// version.
func (p *Protocol) ReadPrefix(r io.Reader, b []byte) (x, y byte, err error) {
	if _, err := io.ReadFull(r, b[:PrefixLen]); err != nil {
		return 0, 0, err
	}
	return p.CheckPrefix(b)
}

// AppendReason appends reason, cut to MaxReason bytes, with its u16
// length before it.
func (p *Protocol) AppendReason(b []byte, reason string) []byte {
	if len(reason) > p.MaxReason {
		reason = reason[:p.MaxReason]
	}
	b = p.Order.AppendUint16(b, uint16(len(reason)))
	return append(b, reason...)
}

// ReadReason reads a reason written by AppendReason, as sent (pass it
// through untrusted.Printable before showing it). A length over MaxReason
// is refused (wrapping ErrForeign) before anything more is read.
func (p *Protocol) ReadReason(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	n := int(p.Order.Uint16(l[:]))
	if n > p.MaxReason {
		return nil, fmt.Errorf("%w: %d-byte reason", ErrForeign, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// MAC is HMAC-SHA256(secret, label | parts...).
func MAC(secret, label []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(label)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// Verify reports, in constant time, whether mac is MAC(secret, label,
// parts...).
func Verify(mac, secret, label []byte, parts ...[]byte) bool {
	return hmac.Equal(mac, MAC(secret, label, parts...))
}

// Nonce fills b with fresh random bytes from r (nil: crypto/rand).
func Nonce(r io.Reader, b []byte) error {
	if r == nil {
		r = rand.Reader
	}
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("making a nonce: %w", err)
	}
	return nil
}

// ModeName is a mode in words.
func ModeName(m byte) string {
	if m == ModeInsecure {
		return "insecure (no secret)"
	}
	return "authenticated (shared secret)"
}
