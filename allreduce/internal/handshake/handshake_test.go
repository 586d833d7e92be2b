package handshake

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
)

var (
	errProto = errors.New("test: protocol error")
	errAuth  = errors.New("test: authentication failed")
)

func testExchange(secret string) *Exchange {
	return &Exchange{
		Protocol: Protocol{Magic: 0x54455354, Version: 7, Order: binary.LittleEndian, MaxReason: 32},
		Name:     "test", Secret: []byte(secret), Mode: ModeHMAC,
		DialerLabel: []byte("d\x00"), ListenerLabel: []byte("l\x00"),
		ErrProtocol: errProto, ErrAuth: errAuth,
	}
}

// pipe runs both sides of one exchange: the listener refuses the body
// "no" and accepts any other; it returns both sides' errors.
func pipe(t *testing.T, listener, dialer *Exchange, body string) (lerr, derr error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		ans, err := listener.Listen(b, len(body), "the dialer", "authentication failed: no")
		if err == nil && string(ans.Body()) == "no" {
			listener.Refuse(b, "refused: a body of no, and a reason longer than allowed")
			err = errors.New("refused")
		} else if err == nil {
			err = ans.Accept(b)
		}
		b.Close()
		done <- err
	}()
	derr = dialer.Dial(a, []byte(body), Peer{Name: "rank 0", Of: "rank 0's", NoSecret: "rank 0 does not know the secret"})
	a.Close()
	return <-done, derr
}

func TestExchange(t *testing.T) {
	const secret = "a secret for the test"
	if lerr, derr := pipe(t, testExchange(secret), testExchange(secret), "body"); lerr != nil || derr != nil {
		t.Fatalf("same secret: listener %v, dialer %v", lerr, derr)
	}
	lerr, derr := pipe(t, testExchange(secret), testExchange("another secret"), "body")
	if !errors.Is(lerr, errAuth) || !errors.Is(derr, errAuth) || !strings.Contains(derr.Error(), "rank 0 refused the connection: authentication failed: no") {
		t.Errorf("wrong secret: listener %v, dialer %v", lerr, derr)
	}
	_, derr = pipe(t, testExchange(secret), testExchange(secret), "no")
	if !errors.Is(derr, errAuth) || !strings.HasSuffix(derr.Error(), "refused: a body of no, and a rea") {
		t.Errorf("refused body: dialer %v, want the reason cut to 32 bytes", derr)
	}
	other := testExchange(secret)
	other.Version++
	lerr, derr = pipe(t, testExchange(secret), other, "body")
	if !errors.Is(derr, errProto) || !strings.Contains(derr.Error(), "rank 0 speaks test protocol version 7, this build version 8") {
		t.Errorf("other version: dialer %v", derr)
	}
	insecure := testExchange("")
	insecure.Mode = ModeInsecure
	_, derr = pipe(t, insecure, testExchange(secret), "body")
	if !errors.Is(derr, errAuth) || !strings.Contains(derr.Error(), "rank 0 is insecure (no secret), this side is authenticated (shared secret)") {
		t.Errorf("other mode: dialer %v", derr)
	}
}

// TestListenerSendsNoMAC: a dialer whose proof fails receives the hello
// and a refusal in words, never macL.
func TestListenerSendsNoMAC(t *testing.T) {
	x := testExchange("a secret for the test")
	answer := make([]byte, HelloLen+MACLen)
	x.PutPrefix(answer, ModeHMAC, 0)
	var out bytes.Buffer
	if _, err := x.Listen(readWriter{bytes.NewReader(answer), &out}, 0, "the dialer", "authentication failed"); !errors.Is(err, errAuth) {
		t.Fatalf("listener: %v, want ErrAuth", err)
	}
	want := x.AppendReason([]byte{1}, "authentication failed")
	if got := out.Bytes()[HelloLen:]; !bytes.Equal(got, want) {
		t.Errorf("after the hello: %x, want %x", got, want)
	}
}

// readWriter reads from one place and writes to another.
type readWriter struct {
	*bytes.Reader
	w *bytes.Buffer
}

func (rw readWriter) Write(p []byte) (int, error) { return rw.w.Write(p) }

func TestReadReason(t *testing.T) {
	p := &Protocol{Order: binary.BigEndian, MaxReason: 4}
	if r, err := p.ReadReason(bytes.NewReader(p.AppendReason(nil, "abcdef"))); err != nil || string(r) != "abcd" {
		t.Errorf("cut reason: %q, %v", r, err)
	}
	if _, err := p.ReadReason(bytes.NewReader([]byte{0, 5, 'a', 'b', 'c', 'd', 'e'})); !errors.Is(err, ErrForeign) {
		t.Errorf("oversized reason: %v, want ErrForeign", err)
	}
}

func TestCheckPrefix(t *testing.T) {
	p := &Protocol{Magic: 1, Version: 2, Order: binary.BigEndian}
	b := make([]byte, PrefixLen)
	p.PutPrefix(b, 3, 4)
	if x, y, err := p.CheckPrefix(b); x != 3 || y != 4 || err != nil {
		t.Errorf("own prefix: %d, %d, %v", x, y, err)
	}
	var ve *VersionError
	if _, _, err := (&Protocol{Magic: 1, Version: 5, Order: binary.BigEndian}).CheckPrefix(b); !errors.As(err, &ve) || ve.Peer != 2 || ve.Own != 5 {
		t.Errorf("other version: %v", err)
	}
	if _, _, err := (&Protocol{Magic: 9, Version: 2, Order: binary.BigEndian}).CheckPrefix(b); err != ErrForeign {
		t.Errorf("other magic: %v", err)
	}
}
