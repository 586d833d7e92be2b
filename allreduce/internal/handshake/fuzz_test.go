package handshake

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
)

// recorder keeps what crosses a connection in one direction.
type recorder struct {
	net.Conn
	sent bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.sent.Write(p)
	return r.Conn.Write(p)
}

// TestSessionKey: both sides derive the same key, HMAC-SHA256(secret,
// label | hello | answer) computed here from the bytes that crossed the
// connection; another connection, or another label, gives another key.
func TestSessionKey(t *testing.T) {
	const secret = "a secret for the test"
	label := []byte("test session\x00")
	run := func() (lk, dk [KeyLen]byte, hello, answer []byte) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		lr, dr := &recorder{Conn: b}, &recorder{Conn: a}
		done := make(chan error, 1)
		go func() {
			ans, err := testExchange(secret).Listen(lr, 4, "the dialer", "no")
			if err == nil {
				err = ans.Accept(lr)
				lk = ans.Key(label)
			}
			done <- err
		}()
		dk, err := testExchange(secret).DialKey(dr, []byte("body"), Peer{Name: "l", Of: "l's", NoSecret: "no"}, label)
		if lerr := <-done; err != nil || lerr != nil {
			t.Fatalf("dialer %v, listener %v", err, lerr)
		}
		return lk, dk, lr.sent.Bytes()[:HelloLen], dr.sent.Bytes()
	}
	lk, dk, hello, answer := run()
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(label)
	m.Write(hello)
	m.Write(answer)
	if want := m.Sum(nil); !bytes.Equal(lk[:], want) || dk != lk {
		t.Fatalf("listener key %x, dialer key %x, want %x", lk, dk, want)
	}
	if lk2, _, _, _ := run(); lk2 == lk {
		t.Error("two connections derived the same key")
	}
	if other := testExchange(secret).SessionKey([]byte("other\x00"), hello, answer); other == lk {
		t.Error("two labels derived the same key")
	}
}

// FuzzReadPrefix: a prefix is accepted only with this protocol's magic and
// version, and returns its last two bytes; at most PrefixLen bytes are
// read.
func FuzzReadPrefix(f *testing.F) {
	p := &Protocol{Magic: 0x52445a53, Version: 2, Order: binary.BigEndian, MaxReason: 32}
	own := make([]byte, PrefixLen)
	p.PutPrefix(own, 1, 0)
	f.Add(own)
	f.Add(own[:5])
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Add(append([]byte{'R', 'D', 'Z', 'S', 0, 9}, 0, 0, 0xff))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		x, y, err := p.ReadPrefix(r, make([]byte, PrefixLen))
		if read := len(b) - r.Len(); read > PrefixLen {
			t.Fatalf("read %d bytes", read)
		}
		var ve *VersionError
		switch {
		case err == nil:
			if len(b) < PrefixLen || p.Order.Uint32(b) != p.Magic || p.Order.Uint16(b[4:]) != p.Version || x != b[6] || y != b[7] {
				t.Fatalf("accepted %x", b)
			}
		case errors.As(err, &ve):
			if ve.Own != p.Version || ve.Peer == p.Version || p.Order.Uint32(b) != p.Magic {
				t.Fatalf("version error %v for %x", err, b)
			}
		case errors.Is(err, ErrForeign):
			if p.Order.Uint32(b) == p.Magic {
				t.Fatalf("own magic refused as foreign: %x", b)
			}
		}
	})
}

// FuzzReadReason: a reason is accepted only within MaxReason bytes, as
// sent, and nothing past it is read.
func FuzzReadReason(f *testing.F) {
	p := &Protocol{Order: binary.LittleEndian, MaxReason: 16}
	f.Add(p.AppendReason(nil, "wrong version"))
	f.Add(p.AppendReason(nil, ""))
	f.Add([]byte{0xff, 0xff, 'a'})
	f.Add([]byte{17, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		reason, err := p.ReadReason(r)
		if err != nil {
			if len(b) >= 2 && int(p.Order.Uint16(b)) > p.MaxReason && !errors.Is(err, ErrForeign) {
				t.Fatalf("oversized reason: %v", err)
			}
			return
		}
		n := int(p.Order.Uint16(b))
		if n > p.MaxReason || !bytes.Equal(reason, b[2:2+n]) || r.Len() != len(b)-2-n {
			t.Fatalf("read %q from %x", reason, b)
		}
	})
}

// FuzzListen: arbitrary bytes as a dialer's answer are never accepted
// (they cannot prove the secret over the listener's fresh nonce), and the
// listener sends only its hello and perhaps a refusal.
func FuzzListen(f *testing.F) {
	x := testExchange("a secret for the test")
	answer := make([]byte, HelloLen+4+MACLen)
	x.PutPrefix(answer, ModeHMAC, 0)
	f.Add(answer)
	f.Add(answer[:10])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		if _, err := x.Listen(readWriter{bytes.NewReader(b), &out}, 4, "the dialer", "no"); err == nil {
			t.Fatalf("accepted %x", b)
		}
		rest := out.Bytes()[HelloLen:]
		if len(rest) > 0 {
			reason, err := x.ReadReason(bytes.NewReader(rest[1:]))
			if rest[0] != 1 || err != nil || len(rest) != 3+len(reason) {
				t.Fatalf("sent %x after the hello", rest)
			}
		}
	})
}

// FuzzDial: arbitrary bytes as a listener's hello and verdict are never
// accepted (they cannot carry macL over the dialer's fresh nonce), and a
// refusal's reason is read within its bound.
func FuzzDial(f *testing.F) {
	x := testExchange("a secret for the test")
	hello := make([]byte, HelloLen)
	x.PutPrefix(hello, ModeHMAC, 0)
	f.Add(append(append([]byte{}, hello...), make([]byte, 1+MACLen)...))
	f.Add(x.AppendReason(append(append([]byte{}, hello...), 1), "refused"))
	f.Add(append(append([]byte{}, hello...), 1, 0xff, 0xff))
	f.Add(append(append([]byte{}, hello...), 7))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := x.Dial(readWriter{bytes.NewReader(b), new(bytes.Buffer)}, []byte("body"), Peer{Name: "l", Of: "l's", NoSecret: "no"})
		if err == nil {
			t.Fatalf("accepted %x", b)
		}
		if !errors.Is(err, errAuth) && !errors.Is(err, errProto) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("error of no kind: %v", err)
		}
	})
}
