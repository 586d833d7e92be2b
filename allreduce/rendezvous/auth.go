package rendezvous

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/handshake"
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
// refuse each other. MACs are compared in constant time. The exchange is
// handshake.Exchange, shared with the shm transport. Both sides then derive
// the connection's session key from it (hello, and answer with macC), which
// seals every frame after it (tcpstore_link.go). Version 2 added the
// sealing; refusals sent before the client has proved the secret name the
// reason, versions and modes only.
//
// Whoever answers a client's connection does get macC over its own nonce,
// so a client must reach the real server: the launcher binds the store's
// port itself, and secrets must pass CheckSecret, which keeps an offline
// search over recorded handshakes out of reach.

const (
	storeMagic   = 0x52445a53 // "RDZS"
	storeVersion = 2          // 2: frames sealed after the handshake (tcpstore_link.go)
	nonceLen     = handshake.NonceLen
	macLen       = handshake.MACLen
	helloLen     = handshake.HelloLen
	answerLen    = helloLen + macLen
	maxReason    = 256

	modeInsecure = handshake.ModeInsecure
	modeHMAC     = handshake.ModeHMAC

	// HandshakeTimeout bounds the whole authentication exchange.
	HandshakeTimeout = 10 * time.Second

	labelClient = "ringddp/rendezvous/client\x00"
	labelServer = "ringddp/rendezvous/server\x00"
)

// storeExchange is the store's handshake with secret in mode mode.
func storeExchange(secret []byte, mode byte) *handshake.Exchange {
	return &handshake.Exchange{
		Protocol:    handshake.Protocol{Magic: storeMagic, Version: storeVersion, Order: binary.BigEndian, MaxReason: maxReason},
		Name:        "store",
		Secret:      secret,
		Mode:        mode,
		DialerLabel: []byte(labelClient), ListenerLabel: []byte(labelServer),
		ErrProtocol: ErrProtocol, ErrAuth: ErrAuth,
	}
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

// serverHandshake authenticates a new connection on the server side and
// returns its session key (tcpstore_link.go), nil for an insecure store.
// The caller has set a deadline. A refused client is told why.
func serverHandshake(c io.ReadWriter, secret []byte, mode byte) (*[handshake.KeyLen]byte, error) {
	x := storeExchange(secret, mode)
	a, err := x.Listen(c, 0, "client", "authentication failed: the server does not accept this client's secret")
	if err != nil {
		return nil, err
	}
	if err := a.Accept(c); err != nil {
		return nil, err
	}
	return sessionKey(mode, a.Key([]byte(labelSession))), nil
}

// clientHandshake authenticates a new connection on the client side and
// returns its session key, nil for an insecure store. The caller has set a
// deadline.
func clientHandshake(c io.ReadWriter, secret []byte, mode byte) (*[handshake.KeyLen]byte, error) {
	k, err := storeExchange(secret, mode).DialKey(c, nil, handshake.Peer{Name: "server", Of: "server",
		NoSecret: "the server does not know the secret (wrong RINGDDP_SECRET, or not the job's store)"}, []byte(labelSession))
	if err != nil {
		return nil, err
	}
	return sessionKey(mode, k), nil
}

// sessionKey is k in a mode with a secret, nil (frames unsealed) in
// insecure mode.
func sessionKey(mode byte, k [handshake.KeyLen]byte) *[handshake.KeyLen]byte {
	if mode == modeInsecure {
		return nil
	}
	return &k
}

// isAuthErr reports errors that retrying cannot fix.
func isAuthErr(err error) bool {
	return errors.Is(err, ErrAuth) || errors.Is(err, ErrProtocol) || errors.Is(err, ErrInvalid)
}
