// Package frameseal authenticates the records of one direction of a
// connection after its handshake: the rendezvous store's requests and
// replies.
//
// Vocabulary:
//
//   - The session key is 32 bytes both ends derive from the handshake (its
//     nonces and the shared secret, see handshake.Exchange.DialKey) and never
//     send. It differs per connection.
//   - A direction is the records one end sends to the other; it has its own
//     key, derived from the session key with a label that names the
//     protocol and the direction (Open), so the two directions, and
//     two protocols, never share a key.
//   - A record is a run of bytes the sender authenticates as one: a frame's
//     header, or its body. Its tag is TagLen bytes, sent after it.
//   - The counter numbers a direction's records from 0; it is the record's
//     nonce, so each end knows which record comes next without it being
//     sent.
//
// A record's tag is the GMAC of its bytes, that is AES-256-GCM sealing no
// plaintext with the record as additional data, under the direction's key
// and the nonce 0x00000000 | counter (u64, big-endian). The record's bytes
// travel in the clear. Both ends advance their counter by one per record,
// checked or not, so a record changed, dropped, replayed, reordered, or
// taken from another connection or direction fails its check, and a nonce
// is never reused under a key: the counter does not wrap in practice (2^64
// records).
//
// The tcp transport's wire protection (allreduce/tcp, wireprotect.go) uses
// the same construction for the mesh.
package frameseal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// TagLen is the length of a record's tag, in bytes.
const TagLen = 16

// KeyLen is the length of a session key, in bytes.
const KeyLen = 32

// ErrAuth is what a record that fails its check returns (wrapped, with the
// record's number).
var ErrAuth = errors.New("frame authentication failed")

// Dir seals or checks the records of one direction. It is not safe for
// concurrent use: a connection's sender and its receiver each hold their
// own.
type Dir struct {
	g     cipher.AEAD
	ctr   uint64
	nonce [12]byte
}

// Open makes the direction named label ("ringddp/rendezvous v2: client to
// server") of the connection whose session key is key.
func Open(key [KeyLen]byte, label string) (*Dir, error) {
	g, err := NewGCM(key, label)
	if err != nil {
		return nil, err
	}
	return &Dir{g: g}, nil
}

// NewGCM is AES-256-GCM under the key HKDF-SHA256 derives from the session
// key key with the label as its info: the one key schedule of the store's
// sealed frames and the tcp transport's protected records.
func NewGCM(key [KeyLen]byte, label string) (cipher.AEAD, error) {
	k, err := hkdf.Key(sha256.New, key[:], nil, label, 32)
	if err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// next returns the nonce of the next record and advances the counter.
func (d *Dir) next() []byte {
	binary.BigEndian.PutUint64(d.nonce[4:], d.ctr)
	d.ctr++
	return d.nonce[:]
}

// Next is the number of the next record.
func (d *Dir) Next() uint64 { return d.ctr }

// Seal writes the tag of rec, the direction's next record, into
// tag[:TagLen] and returns it.
func (d *Dir) Seal(tag, rec []byte) []byte {
	return d.g.Seal(tag[:0], d.next(), nil, rec)
}

// Check checks tag against rec, the direction's next record: an error
// wrapping ErrAuth, naming the record's number, when it does not match.
func (d *Dir) Check(rec, tag []byte) error {
	n := d.ctr
	if len(tag) != TagLen {
		d.ctr++
		return fmt.Errorf("%w on record %d: %d-byte tag", ErrAuth, n, len(tag))
	}
	if _, err := d.g.Open(nil, d.next(), tag, rec); err != nil {
		return fmt.Errorf("%w on record %d", ErrAuth, n)
	}
	return nil
}
