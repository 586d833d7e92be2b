package rendezvous

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/handshake"
	"github.com/ringddp/ringddp/internal/untrusted"
)

func TestCheckSecret(t *testing.T) {
	for secret, want := range map[string]string{
		"":                                    "0 bytes long",
		"hunter2":                             "7 bytes long",
		"0123456789abcde":                     "15 bytes long",
		"12345678901234567890":                "digits only",
		"00000000000000000000000000":          "digits only",
		"zzzzzzzzzzzzzzzzzzzzzzzz":            "only 1 distinct",
		"abababababababababab":                "only 2 distinct",
		"abcdefgabcdefgabcdefg":               "only 7 distinct",
		"abcdefghabcdefgh":                    "",
		"rendezvous test secret":              "",
		strings.Repeat("0123456789abcdef", 4): "", // 32 bytes in hex, as the launcher makes
		"\x00\x01\x02\x03\x04\x05\x06\x07\x00\x01\x02\x03\x04\x05\x06\x07": "",
	} {
		err := CheckSecret([]byte(secret))
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", secret, err)
		case want != "" && (!errors.Is(err, ErrWeakSecret) || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "at least 16 bytes, not all digits, at least 8 distinct byte values")):
			t.Errorf("%q: %v, want a weak secret error saying %q and the rule", secret, err, want)
		case err != nil && secret != "" && strings.Contains(err.Error(), secret):
			t.Errorf("%q: the error shows the secret: %v", secret, err)
		}
	}
}

// TestStoreWeakSecretRefused: servers and clients refuse weak secrets
// (ErrInvalid, naming the rule); the insecure opt-out needs none.
func TestStoreWeakSecretRefused(t *testing.T) {
	weak := StoreConfig{Secret: []byte("123456"), Timeout: time.Second}
	if _, err := ListenStore("127.0.0.1:0", weak); !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrWeakSecret) {
		t.Errorf("ListenStore: %v, want a weak secret refused", err)
	}
	if _, err := DialStore(context.Background(), "127.0.0.1:1", weak); !errors.Is(err, ErrInvalid) || !errors.Is(err, ErrWeakSecret) {
		t.Errorf("DialStore: %v, want a weak secret refused", err)
	}
	srv, err := ListenStore("127.0.0.1:0", StoreConfig{Insecure: true})
	if err != nil {
		t.Fatalf("insecure: %v", err)
	}
	srv.Close()
}

// readStoreHello reads and checks the 40 bytes a store server sends first.
func readStoreHello(t *testing.T, c net.Conn) []byte {
	t.Helper()
	hello := make([]byte, helloLen)
	if _, err := io.ReadFull(c, hello); err != nil {
		t.Fatal(err)
	}
	if binary.BigEndian.Uint32(hello) != storeMagic || binary.BigEndian.Uint16(hello[4:]) != storeVersion || hello[6] != modeHMAC || hello[7] != 0 {
		t.Fatalf("hello %x", hello)
	}
	return hello
}

// TestStoreStrangerGetsNoMAC is a guessing attempt on the store: a client
// without the secret answers the server's hello with a guess and receives
// only a refusal in words (the hello itself is a fresh nonce); the server
// sends macS only after macC checks.
func TestStoreStrangerGetsNoMAC(t *testing.T) {
	srv := startServer(t, testStoreConfig())
	for name, answer := range map[string]func(hello []byte) []byte{
		"guess": func(hello []byte) []byte {
			a := make([]byte, answerLen)
			putHello(a, modeHMAC, bytes.Repeat([]byte{7}, nonceLen))
			copy(a[helloLen:], handshake.MAC([]byte("a guess at the secret"), []byte(labelClient), hello, a[:helloLen]))
			return a
		},
		"zeros": func([]byte) []byte {
			a := make([]byte, answerLen)
			putHello(a, modeHMAC, make([]byte, nonceLen))
			return a
		},
		"reflected hello": func(hello []byte) []byte {
			return append(append([]byte{}, hello...), make([]byte, macLen)...)
		},
	} {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		hello := readStoreHello(t, c)
		if _, err := c.Write(answer(hello)); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(c)
		c.Close()
		if len(rest) < 3 || rest[0] != 1 {
			t.Fatalf("%s: received %x after the hello, want a refusal", name, rest)
		}
		n := int(binary.BigEndian.Uint16(rest[1:]))
		reason := rest[3:]
		if n != len(reason) || untrusted.Printable(reason) != string(reason) || !strings.Contains(string(reason), "authentication failed") {
			t.Errorf("%s: refusal %x (%q): want %d printable bytes saying authentication failed, and nothing after", name, rest, reason, n)
		}
	}
}

// TestStoreOtherVersion: a server or client of another store protocol
// version is refused before anything else, with both versions named.
func TestStoreOtherVersion(t *testing.T) {
	srv := startServer(t, testStoreConfig())
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	readStoreHello(t, c)
	answer := make([]byte, answerLen)
	putHello(answer, modeHMAC, make([]byte, nonceLen))
	binary.BigEndian.PutUint16(answer[4:], storeVersion+1)
	if _, err := c.Write(answer); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(c)
	want := fmt.Sprintf("client speaks store protocol version %d, this build version %d", storeVersion+1, storeVersion)
	if len(rest) < 3 || rest[0] != 1 || !strings.Contains(string(rest), want) {
		t.Errorf("server's answer to a version 2 client: %q, want a refusal saying %q", rest, want)
	}

	// A client reaching a server of another version.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		hello := make([]byte, helloLen)
		putHello(hello, modeHMAC, make([]byte, nonceLen))
		binary.BigEndian.PutUint16(hello[4:], storeVersion+1)
		_, _ = s.Write(hello)
		_, _ = io.Copy(io.Discard, s)
	}()
	_, err = DialStore(context.Background(), ln.Addr().String(), StoreConfig{Secret: testSecret, Timeout: 5 * time.Second})
	if want := fmt.Sprintf("server speaks store protocol version %d, this build version %d", storeVersion+1, storeVersion); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), want) {
		t.Errorf("client: %v, want %q", err, want)
	}
}

// putHello writes the start of a store hello or answer: the prefix in
// mode, then nonce.
func putHello(b []byte, mode byte, nonce []byte) {
	storeExchange(nil, mode).PutPrefix(b, mode, 0)
	copy(b[handshake.PrefixLen:], nonce)
}

// fakeConn reads from a byte slice and records what is written.
type fakeConn struct {
	io.Reader
	w bytes.Buffer
}

func (c *fakeConn) Write(p []byte) (int, error) { return c.w.Write(p) }

// FuzzServerHandshake feeds arbitrary bytes to the store server's side of
// the handshake as the client's answer: it must not panic, must never
// accept a client that cannot know the secret, and must send nothing but
// its hello and, perhaps, a refusal (never macS).
func FuzzServerHandshake(f *testing.F) {
	answer := make([]byte, answerLen)
	putHello(answer, modeHMAC, make([]byte, nonceLen))
	f.Add(answer)
	f.Add(answer[:10])
	other := append([]byte{}, answer...)
	binary.BigEndian.PutUint16(other[4:], storeVersion+1)
	f.Add(other)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c := &fakeConn{Reader: bytes.NewReader(b)}
		if _, err := serverHandshake(c, testSecret, modeHMAC); err == nil {
			t.Fatalf("accepted a client without the secret: %q", b)
		}
		out := c.w.Bytes()
		if len(out) < helloLen {
			t.Fatalf("wrote %x, want a hello first", out)
		}
		if rest := out[helloLen:]; len(rest) > 0 && (rest[0] != 1 || len(rest) < 3 || int(binary.BigEndian.Uint16(rest[1:])) != len(rest)-3) {
			t.Fatalf("wrote %x after the hello, want nothing or a refusal", rest)
		}
	})
}

// FuzzClientHandshake feeds arbitrary bytes to a store client as the
// server's side: no panic, and no server accepted that cannot know the
// secret.
func FuzzClientHandshake(f *testing.F) {
	hello := make([]byte, helloLen)
	putHello(hello, modeHMAC, make([]byte, nonceLen))
	f.Add(hello)
	f.Add(append(append([]byte{}, hello...), make([]byte, 1+macLen)...))
	f.Add(append(append([]byte{}, hello...), 1, 0, 4, 'n', 'o', 'p', 'e'))
	f.Add(append(append([]byte{}, hello...), 1, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := clientHandshake(&fakeConn{Reader: bytes.NewReader(b)}, testSecret, modeHMAC); err == nil {
			t.Fatalf("accepted a server without the secret: %q", b)
		}
	})
}

// TestStorePreAuthRefusals: what the store tells a client that has not
// proved the secret names the reason and nothing about the job: no rank,
// no address, no key, only the protocol versions and modes.
func TestStorePreAuthRefusals(t *testing.T) {
	answer := func(mode byte, version uint16) []byte {
		b := make([]byte, answerLen)
		putHello(b, mode, make([]byte, nonceLen))
		binary.BigEndian.PutUint16(b[4:], version)
		return b
	}
	foreign := answer(modeHMAC, storeVersion)
	copy(foreign, "GET ")
	for _, c := range []struct {
		name string
		in   []byte
		want string
	}{
		{"another version", answer(modeHMAC, storeVersion+1), fmt.Sprintf("client speaks store protocol version %d, this build version %d", storeVersion+1, storeVersion)},
		{"insecure client", answer(modeInsecure, storeVersion), "client is insecure (no secret), this side is authenticated (shared secret)"},
		{"wrong secret", answer(modeHMAC, storeVersion), "authentication failed: the server does not accept this client's secret"},
		{"not the protocol", foreign, "client does not speak the ringddp store protocol"},
	} {
		fc := &fakeConn{Reader: bytes.NewReader(c.in)}
		if _, err := serverHandshake(fc, testSecret, modeHMAC); err == nil {
			t.Fatalf("%s: accepted", c.name)
		}
		out := fc.w.Bytes()[helloLen:]
		if len(out) < 3 || out[0] != 1 {
			t.Fatalf("%s: sent %q after the hello, want a refusal", c.name, out)
		}
		reason := string(out[3:])
		if !strings.HasSuffix(reason, c.want) || strings.Contains(reason, "rank") {
			t.Errorf("%s: refusal %q, want %q and no rank", c.name, reason, c.want)
		}
	}
}
