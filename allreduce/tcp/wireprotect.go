package tcp

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/ringddp/ringddp/allreduce/internal/frameseal"
)

// WireProtection is what protects a connection's frames after the
// handshake (Config.WireProtection).
type WireProtection string

// The wire protection modes.
const (
	// WireNone: frames carry a CRC-32C of their header only, as before
	// protection existed; an on-path attacker can change any byte.
	WireNone WireProtection = "none"
	// WireMAC: every frame's header and payload are authenticated (GMAC,
	// AES-256-GCM over empty plaintext) with a per-direction key and
	// record counter, so that a changed, dropped, replayed, reordered or
	// spliced frame fails the link. Payloads travel in the clear.
	WireMAC WireProtection = "mac"
	// WireAEAD: as WireMAC, and headers and payloads are encrypted
	// (AES-256-GCM).
	WireAEAD WireProtection = "aead"
	// WireAuto: WireMAC on each link between two hosts, WireNone on each
	// link whose two ends are on one host (sameHost: one address at both
	// ends, or loopback at both). A link within a host never leaves its
	// kernel: only someone who could as well change the ranks' memory
	// (root on that host) could change its bytes, and there mac costs
	// most, as loopback moves bytes at memory speed. Both ends decide from
	// their own socket's addresses and bind their choice into the
	// handshake: where a relay or NAT makes them disagree, the handshake
	// fails naming both ends' views (set mac or aead explicitly then).
	WireAuto WireProtection = "auto"
)

// DefaultWireProtection is Config.WireProtection's default: auto (mac
// between hosts, none within one), by measurement (the figures are in
// docs/multiprocess.md). Over loopback, where the CPU moves every byte, mac
// and aead slow a large all-reduce markedly; over a link of a network's
// speed, which is what lies between hosts, their cost is within measurement
// noise or a few percent. mac is the default where it costs at most 10%: on
// a network it does, and there an on-path attacker can be; within a host it
// does not, and there none cannot.
const DefaultWireProtection = WireAuto

// WireProtectionNames lists the modes, for help and messages.
func WireProtectionNames() string {
	return string(WireAuto) + ", " + string(WireNone) + ", " + string(WireMAC) + ", " + string(WireAEAD)
}

// forLink is the mode of a link under w: w itself, or for WireAuto mac
// between hosts and none within one.
func (w WireProtection) forLink(sameHost bool) WireProtection {
	switch {
	case w != WireAuto:
		return w
	case sameHost:
		return WireNone
	}
	return WireMAC
}

// sameHost reports whether a connection with these two ends stays on one
// host: the same IP address at both ends (a host dialing itself on any of
// its addresses), or loopback at both.
func sameHost(local, remote net.Addr) bool {
	la, ok1 := local.(*net.TCPAddr)
	ra, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return false
	}
	return la.IP.Equal(ra.IP) || (la.IP.IsLoopback() && ra.IP.IsLoopback())
}

// ParseWireProtection parses "auto", "none", "mac" or "aead"; "" is the
// default (Config.WireProtection's zero value).
func ParseWireProtection(s string) (WireProtection, error) {
	switch m := WireProtection(strings.ToLower(strings.TrimSpace(s))); m {
	case "", WireNone, WireMAC, WireAEAD, WireAuto:
		return m, nil
	}
	return "", fmt.Errorf("wire protection %q: unknown mode (valid: %s)", s, WireProtectionNames())
}

// ErrWireAuth: a frame failed its wire protection check, because its bytes
// were changed, dropped, replayed, reordered or spliced in transit, or
// because the peer protects its frames in another mode (or none). The
// link fails with an error wrapping it that names both ends; the peer
// learns it from this rank's abort.
var ErrWireAuth = errors.New("wire protection check failed")

// wireKey is a link's 32-byte session key, derived by both ends during the
// handshake; wire protection derives its per-direction keys from it.
type wireKey [32]byte

// tagLen is the size of a record's authentication tag.
const tagLen = 16

// Frame magics by mode. A mac frame's header travels in the clear with
// its own magic, so that a rank without protection refuses it as a mode
// mismatch instead of misreading its tags as payload; an aead header is
// encrypted and its magic is checked once decrypted.
const (
	macMagic  = 0x5244444D // "RDDM"
	aeadMagic = 0x52444445 // "RDDE"
)

// magicOf is the frame magic of mode.
func magicOf(mode WireProtection) uint32 {
	switch mode {
	case WireMAC:
		return macMagic
	case WireAEAD:
		return aeadMagic
	}
	return frameMagic
}

// wireDir protects one direction of a link: the records one rank sends to
// another. A frame is one record for its header and one per started
// 256 KiB (pieceSize) of its payload, each followed by a 16-byte tag:
//
//	nonce  = 0x00000000 || counter (u64, big-endian; the direction's
//	         records numbered from 0)
//	mac:   record = body || GMAC   (AES-256-GCM Seal of no plaintext,
//	                                body as additional data)
//	aead:  record = AES-256-GCM Seal(body)  (ciphertext || tag)
//
// The key is HKDF-SHA256 of the link's session key with the mode and both
// ranks in the info, so each direction (and mode) has its own key, and the
// counter, which only ever advances, is the nonce: a nonce is never reused
// under a key, and a record moved, dropped, replayed or taken from another
// link or direction fails its check.
//
// The counter does not wrap in practice: 2^64 records of at least 16 bytes
// would take centuries at any speed.
type wireDir struct {
	g       cipher.AEAD
	encrypt bool
	self    int // this rank and the other end, for messages
	peer    int
	mode    WireProtection
	ctr     uint64
	nonce   [12]byte
	tag     [tagLen]byte    // scratch
	hdr     [headerLen]byte // scratch
}

// newWireDir makes the protection of the records rank from sends to rank
// to under mode, keyed from the link's session key, at rank self.
func newWireDir(mode WireProtection, key wireKey, from, to, self int) (*wireDir, error) {
	info := fmt.Sprintf("ringddp/tcp wire protection v1: %s, rank %d to rank %d", mode, from, to)
	g, err := frameseal.NewGCM(key, info)
	if err != nil {
		return nil, err
	}
	peer := from
	if self == from {
		peer = to
	}
	return &wireDir{g: g, encrypt: mode == WireAEAD, self: self, peer: peer, mode: mode}, nil
}

// next returns the nonce of the next record and advances the counter.
func (d *wireDir) next() []byte {
	binary.BigEndian.PutUint64(d.nonce[4:], d.ctr)
	d.ctr++
	return d.nonce[:]
}

// appendRecord appends body sealed as the next record to dst; dst must
// have room for len(body)+tagLen more bytes (no allocation), and not
// overlap body.
func (d *wireDir) appendRecord(dst, body []byte) []byte {
	if d.encrypt {
		return d.g.Seal(dst, d.next(), body, nil)
	}
	n := len(dst)
	dst = append(dst, body...)
	d.g.Seal(d.tag[:0], d.next(), nil, dst[n:])
	return append(dst, d.tag[:]...)
}

// appendHeader appends f's header, sealed as the next record, to dst.
func (d *wireDir) appendHeader(dst []byte, f *frame) []byte {
	encodeHeaderMagic(d.hdr[:], f, magicOf(d.mode))
	return d.appendRecord(dst, d.hdr[:])
}

// macTag writes the tag of body, the next record, into tag (mac only:
// the record's body goes out as it is, from the caller's buffer).
func (d *wireDir) macTag(tag, body []byte) {
	d.g.Seal(tag[:0], d.next(), nil, body)
}

// open checks the next record, rec (body and tag), in place: on success
// rec[:len(rec)-tagLen] is the body, decrypted for aead.
func (d *wireDir) open(rec []byte) error {
	nonce := d.next()
	if len(rec) < tagLen {
		return d.failed()
	}
	var err error
	if d.encrypt {
		_, err = d.g.Open(rec[:0], nonce, rec, nil)
	} else {
		n := len(rec) - tagLen
		_, err = d.g.Open(nil, nonce, rec[n:], rec[:n])
	}
	if err != nil {
		return d.failed()
	}
	return nil
}

// openMAC checks the next record, body with its tag apart (mac only).
func (d *wireDir) openMAC(body, tag []byte) error {
	if _, err := d.g.Open(nil, d.next(), tag, body); err != nil {
		return d.failed()
	}
	return nil
}

// openTo checks and decrypts the next record rec into dst, which has room
// for its body (aead only).
func (d *wireDir) openTo(dst, rec []byte) error {
	if _, err := d.g.Open(dst[:0], d.next(), rec, nil); err != nil {
		return d.failed()
	}
	return nil
}

// skip passes over n records unchecked (a failed link's discarded
// payload), keeping the counter in step with the peer's.
func (d *wireDir) skip(n int64) { d.ctr += uint64(n) }

// failed is the error of the record just checked.
func (d *wireDir) failed() error {
	return fmt.Errorf("tcp rank %d: link to rank %d: %w on record %d from rank %d (-wire-protection %s): the link's bytes were altered, dropped, "+
		"replayed or reordered in transit, or rank %d does not use -wire-protection %s", d.self, d.peer, ErrWireAuth, d.ctr-1, d.peer, d.mode, d.peer, d.mode)
}

// records is the number of payload records of an n-byte payload.
func records(n int64) int64 { return (n + pieceSize - 1) / pieceSize }
