package shm

import (
	"bytes"
	"io"
	"testing"
)

// rw is a connection that reads from r and records what is written.
type rw struct {
	r io.Reader
	w bytes.Buffer
}

func (c *rw) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *rw) Write(p []byte) (int, error) { return c.w.Write(p) }

var fuzzSecret = []byte("a secret for the shm handshake fuzzers")

func fuzzParams(rank int) *hsParams {
	return &hsParams{secret: fuzzSecret, mode: modeHMAC, size: 3, rank: rank, slots: 2, slotLen: 4096, runID: "fuzz"}
}

// handshakeSeeds are a listener's hello and a dialer's answer to it, as
// rank 1 and rank 0 send them (the answer's MAC is over that hello's
// nonce, so another listener refuses it).
func handshakeSeeds(t testing.TB) (hello, answer []byte) {
	l := &rw{r: bytes.NewReader(nil)}
	_, _ = listenHandshake(l, fuzzParams(0), func(int) string { return "" })
	hello = l.w.Bytes()
	d := &rw{r: bytes.NewReader(hello)}
	_ = dialHandshake(d, fuzzParams(1), 0)
	if len(hello) == 0 || d.w.Len() == 0 {
		t.Fatal("no seeds")
	}
	return hello, d.w.Bytes()
}

// FuzzListenHandshake feeds arbitrary bytes, as a dialer's answer, to a
// listening rank: nothing panics, and no dialer is admitted without the
// secret (its nonce is fresh, so no recorded answer can pass).
func FuzzListenHandshake(f *testing.F) {
	_, answer := handshakeSeeds(f)
	f.Add(answer)
	f.Add(answer[:40])
	f.Add(bytes.Repeat([]byte{0xff}, len(answer)))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		admitted := false
		from, err := listenHandshake(&rw{r: bytes.NewReader(b)}, fuzzParams(0), func(int) string { admitted = true; return "" })
		if err == nil || admitted || from >= 0 {
			t.Fatalf("admitted rank %d (%v) without the secret: %x", from, err, b)
		}
	})
}

// FuzzDialHandshake feeds arbitrary bytes, as a listener's hello and
// verdict, to a dialing rank: nothing panics, and no listener that cannot
// know the secret is accepted.
func FuzzDialHandshake(f *testing.F) {
	hello, _ := handshakeSeeds(f)
	f.Add(hello)
	f.Add(append(bytes.Clone(hello), make([]byte, 33)...))
	f.Add(append(bytes.Clone(hello), 1, 4, 0, 'n', 'o', 'p', 'e'))
	f.Add(append(bytes.Clone(hello), 1, 0xff, 0xff))
	f.Add(append(bytes.Clone(hello), 7))
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := dialHandshake(&rw{r: bytes.NewReader(b)}, fuzzParams(1), 0); err == nil {
			t.Fatalf("accepted a listener without the secret: %x", b)
		}
	})
}

// TestPreAuthRefusalsNameNoRank: what a listening rank sends a dialer that
// has not proved the secret (a refusal for another version, another mode,
// or a failed proof) names neither its rank nor the world's size.
func TestPreAuthRefusalsNameNoRank(t *testing.T) {
	p := func() *hsParams { q := fuzzParams(7); q.size = 11; return q }
	l := &rw{r: bytes.NewReader(nil)}
	_, _ = listenHandshake(l, p(), func(int) string { return "" })
	d := &rw{r: bytes.NewReader(l.w.Bytes())}
	dp := p()
	dp.rank = 8
	_ = dialHandshake(d, dp, 7)
	answer := d.w.Bytes() // its MAC is over another listener's nonce
	version, mode := bytes.Clone(answer), bytes.Clone(answer)
	version[4]++
	mode[6] = modeInsecure
	for name, in := range map[string][]byte{"another version": version, "another mode": mode, "failed proof": answer} {
		c := &rw{r: bytes.NewReader(in)}
		if _, err := listenHandshake(c, p(), func(int) string { return "" }); err == nil {
			t.Fatalf("%s: admitted", name)
		}
		refusal := c.w.Bytes()[40:] // after the hello
		t.Logf("%s: %q", name, refusal)
		if len(refusal) == 0 || bytes.ContainsAny(refusal, "7") || bytes.Contains(refusal, []byte("11")) {
			t.Errorf("%s: sent %q, want a refusal naming neither the rank nor the size", name, refusal)
		}
	}
}
