package rendezvous

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ringddp/ringddp/internal/untrusted"
)

// The store handshake. The server speaks first:
//
//	server → client  hello   magic "RDZS" | version u16 | mode u8 | 0 | nonceS [32]        (40 bytes)
//	client → server  answer  magic "RDZS" | version u16 | mode u8 | 0 | nonceC [32] | macC [32] (72 bytes)
//	server → client  verdict 0 | macS [32]                 accepted
//	                         1 | len u16 | reason [len]    refused (len <= 256)
//
//	macC = HMAC-SHA256(secret, "ringddp/rendezvous/client\x00" | hello | answer[:40])
//	macS = HMAC-SHA256(secret, "ringddp/rendezvous/server\x00" | hello | answer)
//
// Each side proves it knows the secret over a nonce the other chose, so
// neither answer can be replayed; the labels differ, so neither can be
// reflected; macS covers the whole exchange, macC included. The client —
// the side that connects — proves the secret first: the server sends
// nothing computed with the secret (macS) to a client whose macC has not
// checked, so a stranger who connects obtains no value to test guesses of
// the secret against (the tcp transport's handshake, version 3, follows
// the same rule). The version is checked before anything else, on both
// sides, and a peer of another version is refused with both named. mode is
// 1 with a secret and 0 for an explicitly insecure store; the two modes
// refuse each other. MACs are compared in constant time.
//
// Whoever answers a client's connection does get macC over its own nonce,
// so a client must reach the real server: the launcher binds the store's
// port itself, and secrets must pass CheckSecret, which keeps an offline
// search over recorded handshakes out of reach.

const (
	storeMagic   = 0x52445a53 // "RDZS"
	storeVersion = 1
	nonceLen     = 32
	macLen       = sha256.Size
	helloLen     = 8 + nonceLen
	answerLen    = helloLen + macLen
	maxReason    = 256

	modeInsecure = 0
	modeHMAC     = 1

	// HandshakeTimeout bounds the whole authentication exchange.
	HandshakeTimeout = 10 * time.Second
)

var (
	labelClient = []byte("ringddp/rendezvous/client\x00")
	labelServer = []byte("ringddp/rendezvous/server\x00")
)

func mac(secret, label []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(label)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// authMode checks a configuration's secret and returns its mode.
func authMode(secret []byte, insecure bool) (byte, error) {
	if insecure {
		return modeInsecure, nil
	}
	if len(secret) == 0 {
		return 0, fmt.Errorf("%w: empty secret (set RINGDDP_SECRET, or opt out explicitly with Insecure)", ErrInvalid)
	}
	if err := CheckSecret(secret); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return modeHMAC, nil
}

// The secret rule (CheckSecret).
const (
	// MinSecretLen is the length, in bytes, of the shortest secret accepted.
	MinSecretLen = 16
	// MinSecretSymbols is the fewest distinct byte values a secret may have.
	MinSecretSymbols = 8

	secretRule = "the rule: at least 16 bytes, not all digits, at least 8 distinct byte values; " +
		"make one with: openssl rand -hex 32"
)

// ErrWeakSecret is what CheckSecret refuses a secret with.
var ErrWeakSecret = errors.New("weak secret")

// CheckSecret refuses a secret that someone who recorded a handshake, or
// answered a connection, could find by trying guesses offline: one shorter
// than MinSecretLen bytes, one of ASCII digits only (a PIN, a date, a phone
// number) or one with fewer than MinSecretSymbols distinct byte values (a
// repeated byte, "abababab..."). It cannot tell a random secret from a
// long guessable phrase: use 32 random bytes, as the launcher does
// (openssl rand -hex 32). The error, which wraps ErrWeakSecret, names the
// rule and never the secret.
func CheckSecret(secret []byte) error {
	var seen [256]bool
	distinct, digits := 0, true
	for _, b := range secret {
		if !seen[b] {
			seen[b] = true
			distinct++
		}
		digits = digits && '0' <= b && b <= '9'
	}
	switch {
	case len(secret) < MinSecretLen:
		return fmt.Errorf("%w: %d bytes long (%s)", ErrWeakSecret, len(secret), secretRule)
	case digits:
		return fmt.Errorf("%w: digits only (%s)", ErrWeakSecret, secretRule)
	case distinct < MinSecretSymbols:
		return fmt.Errorf("%w: only %d distinct byte values (%s)", ErrWeakSecret, distinct, secretRule)
	}
	return nil
}

func modeName(m byte) string {
	if m == modeInsecure {
		return "insecure (no secret)"
	}
	return "authenticated (shared secret)"
}

func putHello(b []byte, mode byte, nonce []byte) {
	binary.BigEndian.PutUint32(b[0:], storeMagic)
	binary.BigEndian.PutUint16(b[4:], storeVersion)
	b[6], b[7] = mode, 0
	copy(b[8:], nonce)
}

// checkHello validates the fixed part of a hello or answer.
func checkHello(b []byte, mode byte, who string) error {
	if binary.BigEndian.Uint32(b[0:]) != storeMagic {
		return fmt.Errorf("%w: %s does not speak the ringddp store protocol", ErrProtocol, who)
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != storeVersion {
		return fmt.Errorf("%w: %s speaks store protocol version %d, this build version %d", ErrProtocol, who, v, storeVersion)
	}
	if b[6] != mode {
		return fmt.Errorf("%w: %s is %s, this side is %s", ErrAuth, who, modeName(b[6]), modeName(mode))
	}
	return nil
}

func newNonce() ([]byte, error) {
	n := make([]byte, nonceLen)
	if _, err := rand.Read(n); err != nil {
		return nil, err
	}
	return n, nil
}

// serverHandshake authenticates a new connection on the server side. The
// caller has set a deadline. A refused client is told why.
func serverHandshake(c net.Conn, secret []byte, mode byte) error {
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	hello := make([]byte, helloLen)
	putHello(hello, mode, nonce)
	if _, err := c.Write(hello); err != nil {
		return err
	}
	answer := make([]byte, answerLen)
	if _, err := io.ReadFull(c, answer); err != nil {
		return err
	}
	if err := checkHello(answer, mode, "client"); err != nil {
		refuse(c, err.Error())
		return err
	}
	want := mac(secret, labelClient, hello, answer[:helloLen])
	if !hmac.Equal(want, answer[helloLen:]) {
		err := fmt.Errorf("%w: client does not know the secret", ErrAuth)
		refuse(c, "authentication failed: the server does not accept this client's secret")
		return err
	}
	verdict := make([]byte, 1+macLen)
	copy(verdict[1:], mac(secret, labelServer, hello, answer))
	_, err = c.Write(verdict)
	return err
}

func refuse(c net.Conn, reason string) {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	b := make([]byte, 3+len(reason))
	b[0] = 1
	binary.BigEndian.PutUint16(b[1:], uint16(len(reason)))
	copy(b[3:], reason)
	_, _ = c.Write(b)
}

// clientHandshake authenticates a new connection on the client side. The
// caller has set a deadline.
func clientHandshake(c net.Conn, secret []byte, mode byte) error {
	hello := make([]byte, helloLen)
	if _, err := io.ReadFull(c, hello); err != nil {
		return fmt.Errorf("reading server hello: %w", err)
	}
	if err := checkHello(hello, mode, "server"); err != nil {
		return err
	}
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	answer := make([]byte, answerLen)
	putHello(answer, mode, nonce)
	copy(answer[helloLen:], mac(secret, labelClient, hello, answer[:helloLen]))
	if _, err := c.Write(answer); err != nil {
		return err
	}
	var status [1]byte
	if _, err := io.ReadFull(c, status[:]); err != nil {
		return fmt.Errorf("reading server verdict: %w", err)
	}
	switch status[0] {
	case 0:
		got := make([]byte, macLen)
		if _, err := io.ReadFull(c, got); err != nil {
			return fmt.Errorf("reading server verdict: %w", err)
		}
		if !hmac.Equal(got, mac(secret, labelServer, hello, answer)) {
			return fmt.Errorf("%w: the server does not know the secret (wrong RINGDDP_SECRET, or not the job's store)", ErrAuth)
		}
		return nil
	case 1:
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return fmt.Errorf("%w: server refused the connection", ErrAuth)
		}
		n := int(binary.BigEndian.Uint16(l[:]))
		if n > maxReason {
			return fmt.Errorf("%w: oversized refusal from server", ErrProtocol)
		}
		reason := make([]byte, n)
		if _, err := io.ReadFull(c, reason); err != nil {
			return fmt.Errorf("%w: server refused the connection", ErrAuth)
		}
		return fmt.Errorf("%w: server refused the connection: %s", ErrAuth, untrusted.Printable(reason))
	}
	return fmt.Errorf("%w: bad verdict byte %d from server", ErrProtocol, status[0])
}

// isAuthErr reports errors that retrying cannot fix.
func isAuthErr(err error) bool {
	return errors.Is(err, ErrAuth) || errors.Is(err, ErrProtocol) || errors.Is(err, ErrInvalid)
}
