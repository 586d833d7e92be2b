package tcp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// ---- a relay between two ranks ----

// relay sits between rank 1 and rank 0 (rank 1 dials it for rank 0, as a
// store rewrite tells it): it passes the handshake through, and once armed
// hands what rank 0 sends to tamper.
type relay struct {
	ln     net.Listener
	from   net.IP                 // the address it dials rank 0 from; nil: any
	target atomic.Pointer[string] // rank 0's address
	armed  atomic.Bool
	tamper func(r *bufio.Reader, w io.Writer) error
	wg     sync.WaitGroup
}

// relayStore shows rank 1 the relay's address for rank 0.
type relayStore struct {
	rendezvous.Store
	r     *relay
	runID string
	once  sync.Once
	ready chan struct{}
}

func (s *relayStore) Set(ctx context.Context, key string, value []byte) error {
	if key == addrKey(s.runID, 0) {
		v := string(value)
		s.r.target.Store(&v)
		s.once.Do(func() { close(s.ready) })
	}
	return s.Store.Set(ctx, key, value)
}

func (s *relayStore) Get(ctx context.Context, key string) ([]byte, error) {
	if key == addrKey(s.runID, 0) {
		select {
		case <-s.ready:
			return []byte(s.r.ln.Addr().String()), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Get(ctx, key)
}

func (r *relay) serve() {
	defer r.wg.Done()
	for {
		down, err := r.ln.Accept()
		if err != nil {
			return
		}
		d := net.Dialer{}
		if r.from != nil {
			d.LocalAddr = &net.TCPAddr{IP: r.from}
		}
		up, err := d.Dial("tcp", *r.target.Load())
		if err != nil {
			down.Close()
			continue
		}
		r.wg.Add(2)
		go r.pipe(down, up, false)
		go r.pipe(up, down, true)
	}
}

// pipe copies from src to dst, half-closing dst at the end; from rank 0
// (fromTarget) what comes once the relay is armed goes through tamper.
func (r *relay) pipe(src, dst net.Conn, fromTarget bool) {
	defer r.wg.Done()
	defer dst.(*net.TCPConn).CloseWrite()
	br := bufio.NewReaderSize(src, 1<<20)
	for {
		if _, err := br.Peek(1); err != nil {
			return
		}
		if fromTarget && r.armed.Load() && r.tamper != nil {
			if r.tamper(br, dst) != nil {
				return
			}
			_, _ = io.Copy(dst, br)
			return
		}
		b, _ := br.Peek(br.Buffered())
		if _, err := dst.Write(b); err != nil {
			return
		}
		_, _ = br.Discard(len(b))
	}
}

// newRelay starts a relay that dials rank 0 from the address from (nil:
// any), and returns the configurations of ranks 0 and 1 of a pair whose
// store sends rank 1 to it.
func newRelay(t *testing.T, from net.IP, tamper func(r *bufio.Reader, w io.Writer) error) ([]Config, *relay) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, from: from, tamper: tamper}
	store := &relayStore{Store: rendezvous.NewMemStore(), r: r, runID: "test", ready: make(chan struct{})}
	r.wg.Add(1)
	go r.serve()
	t.Cleanup(func() {
		ln.Close()
		r.wg.Wait()
	})
	return []Config{testConfig(0, 2, store), testConfig(1, 2, store)}, r
}

// relayedPair dials ranks 0 and 1 under mode with the relay between them.
func relayedPair(t *testing.T, mode WireProtection, tamper func(r *bufio.Reader, w io.Writer) error, opts ...func(*Config)) ([]*Conn, *relay) {
	t.Helper()
	cfgs, r := newRelay(t, nil, tamper)
	for i := range cfgs {
		cfgs[i].WireProtection = mode
		cfgs[i].Timeout = 5 * time.Second
		for _, o := range opts {
			o(&cfgs[i])
		}
	}
	conns, errs := dialConfigs(cfgs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Dial: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	r.armed.Store(true)
	return conns, r
}

// frameLen is the bytes on the wire of a data frame of n ≤ pieceSize bytes.
func frameLen(mode WireProtection, n int) int {
	if mode == WireNone {
		return headerLen + n
	}
	if n == 0 {
		return headerLen + tagLen
	}
	return headerLen + n + 2*tagLen
}

// TestWireRelay: an on-path relay that passes the handshake through and
// then changes, drops, replays or reorders what rank 0 sends rank 1. Under
// none the damage reaches rank 1's result unnoticed (which shows that the
// relay works); under mac and aead rank 1's receive fails naming the link,
// and its abort tells rank 0.
func TestWireRelay(t *testing.T) {
	const n = 4 << 10
	a, b := pattern(n, 1), pattern(n, 2)
	for _, sc := range relayScenarios(n, a, b) {
		// auto on the relay's loopback links is none; with the hook saying
		// the ranks are on two hosts, mac.
		for _, pm := range []struct {
			name     string
			mode     WireProtection
			effect   WireProtection
			sameHost func(local, remote net.Addr) bool
		}{
			{"none", WireNone, WireNone, nil},
			{"mac", WireMAC, WireMAC, nil},
			{"aead", WireAEAD, WireAEAD, nil},
			{"auto within a host", WireAuto, WireNone, nil},
			{"auto between hosts", WireAuto, WireMAC, func(net.Addr, net.Addr) bool { return false }},
		} {
			mode := pm.effect
			t.Run(sc.name+"/"+pm.name, func(t *testing.T) {
				fl := frameLen(mode, n)
				conns, _ := relayedPair(t, pm.mode, func(r *bufio.Reader, w io.Writer) error { return sc.tamper(fl, r, w) },
					func(c *Config) { c.sameHost = pm.sameHost })
				ctx, cancel := ctxT(10 * time.Second)
				defer cancel()
				// Same header twice: only the payloads tell the messages apart.
				for _, p := range [][]byte{a, b} {
					if err := conns[0].Send(ctx, 1, hdr(0, 0), p); err != nil {
						t.Fatalf("send: %v", err)
					}
				}
				if mode == WireNone {
					for i, want := range sc.none {
						sink := &bufSink{dst: make([]byte, n)}
						if err := conns[1].Recv(ctx, 0, hdr(0, 0), n, sink); err != nil {
							t.Fatalf("receive %d: %v", i, err)
						}
						if !bytes.Equal(sink.dst, want) {
							t.Fatalf("receive %d: not what the relay made of it", i)
						}
					}
					return
				}
				var err error
				for i := 0; i <= sc.failAt; i++ {
					sink := &bufSink{dst: make([]byte, n)}
					err = conns[1].Recv(ctx, 0, hdr(0, 0), n, sink)
					if i < sc.failAt && (err != nil || !bytes.Equal(sink.dst, a)) {
						t.Fatalf("receive %d before the damage: %v", i, err)
					}
				}
				if !errors.Is(err, ErrWireAuth) || !strings.Contains(err.Error(), "tcp rank 1: link to rank 0") {
					t.Fatalf("rank 1: got %v, want ErrWireAuth naming the link", err)
				}
				// As package allreduce does on any error: rank 0 hears of it.
				conns[1].Abort(err)
				rerr := conns[0].Recv(ctx, 1, hdr(0, 9), 8, discardSink{})
				var pe *transport.PeerError
				if !errors.As(rerr, &pe) || pe.Peer != 1 || !strings.Contains(rerr.Error(), "link to rank 0") || !strings.Contains(rerr.Error(), ErrWireAuth.Error()) {
					t.Fatalf("rank 0: got %v, want rank 1's abort naming the link", rerr)
				}
			})
		}
	}
}

// relayScenario is one damage of TestWireRelay's relay.
type relayScenario struct {
	name string
	// tamper works on the frames of a and b (each fl bytes).
	tamper func(fl int, r *bufio.Reader, w io.Writer) error
	// none is what rank 1 receives without protection; protected
	// modes fail on receive number failAt (0 or 1).
	none   [][]byte
	failAt int
}

// twoFrames reads two frames of fl bytes each from r.
func twoFrames(fl int, r *bufio.Reader) ([]byte, []byte, error) {
	fa, fb := make([]byte, fl), make([]byte, fl)
	if _, err := io.ReadFull(r, fa); err != nil {
		return nil, nil, err
	}
	_, err := io.ReadFull(r, fb)
	return fa, fb, err
}

// relayScenarios are TestWireRelay's damages to the frames of a and b
// (n bytes each): a payload byte flipped, a frame dropped, a frame
// replayed, two frames reordered.
func relayScenarios(n int, a, b []byte) []relayScenario {
	flipped := bytes.Clone(a)
	flipped[1000] ^= 0x40
	return []relayScenario{
		{"flip a payload byte", func(fl int, r *bufio.Reader, w io.Writer) error {
			fa, fb, err := twoFrames(fl, r)
			if err != nil {
				return err
			}
			off := headerLen // the payload follows the header
			if fl != headerLen+n {
				off += tagLen // and its tag
			}
			fa[off+1000] ^= 0x40
			_, err = w.Write(append(fa, fb...))
			return err
		}, [][]byte{flipped, b}, 0},
		{"drop a frame", func(fl int, r *bufio.Reader, w io.Writer) error {
			_, fb, err := twoFrames(fl, r)
			if err != nil {
				return err
			}
			_, err = w.Write(fb)
			return err
		}, [][]byte{b}, 0},
		{"replay a frame", func(fl int, r *bufio.Reader, w io.Writer) error {
			fa, _, err := twoFrames(fl, r)
			if err != nil {
				return err
			}
			_, err = w.Write(append(fa, fa...))
			return err
		}, [][]byte{a, a}, 1},
		{"reorder frames", func(fl int, r *bufio.Reader, w io.Writer) error {
			fa, fb, err := twoFrames(fl, r)
			if err != nil {
				return err
			}
			_, err = w.Write(append(fb, fa...))
			return err
		}, [][]byte{b, a}, 0},
	}
}

// TestWireRelayLarge: a byte changed deep inside a large message (the
// writev and staged paths, pieces and placed destinations) is caught.
func TestWireRelayLarge(t *testing.T) {
	const n = 5<<20 + 7
	for _, mode := range protectedModes {
		for _, placed := range []bool{false, true} {
			hl := headerLen + tagLen
			at := hl + 9*(pieceSize+tagLen) + 12345 // inside record 10 of the payload
			conns, _ := relayedPair(t, mode, func(r *bufio.Reader, w io.Writer) error {
				if _, err := io.CopyN(w, r, int64(at)); err != nil {
					return err
				}
				c, err := r.ReadByte()
				if err != nil {
					return err
				}
				_, err = w.Write([]byte{c ^ 1})
				return err
			})
			ctx, cancel := ctxT(20 * time.Second)
			var sink transport.Sink = &bufSink{dst: make([]byte, n)}
			if placed {
				sink = &placeSink{dst: make([]byte, n)}
			}
			serr := make(chan error, 1)
			go func() { serr <- conns[0].Send(ctx, 1, hdr(0, 0), pattern(n, 5)) }()
			err := conns[1].Recv(ctx, 0, hdr(0, 0), n, sink)
			if !errors.Is(err, ErrWireAuth) {
				t.Errorf("%s, placed %v: got %v, want ErrWireAuth", mode, placed, err)
			}
			if err := <-serr; err != nil {
				t.Errorf("%s, placed %v: send: %v (the receiver drains after a failed check)", mode, placed, err)
			}
			cancel()
		}
	}
}

// TestWireModeMismatch: ranks that disagree on the mode fail, either at
// the handshake or on the first frame, with an error that says so; never
// a silent result.
func TestWireModeMismatch(t *testing.T) {
	for _, pair := range [][2]WireProtection{{WireMAC, WireNone}, {WireNone, WireMAC}, {WireMAC, WireAEAD}, {WireAEAD, WireNone}} {
		t.Run(string(pair[0])+"-"+string(pair[1]), func(t *testing.T) {
			store := rendezvous.NewMemStore()
			cfgs := []Config{testConfig(0, 2, store), testConfig(1, 2, store)}
			for i := range cfgs {
				cfgs[i].WireProtection = pair[i]
				cfgs[i].Timeout = 3 * time.Second
				cfgs[i].ConnectTimeout = 3 * time.Second
			}
			conns, errs := dialConfigs(cfgs)
			defer func() {
				for _, c := range conns {
					if c != nil {
						c.Close()
					}
				}
			}()
			if errs[0] != nil || errs[1] != nil {
				for _, err := range errs {
					if err != nil && !strings.Contains(err.Error(), "wire protection") {
						t.Errorf("Dial: %v, want a wire protection mismatch", err)
					}
				}
				return
			}
			ctx, cancel := ctxT(5 * time.Second)
			defer cancel()
			go func() { _ = conns[0].Send(ctx, 1, hdr(0, 0), make([]byte, 64)) }()
			err := conns[1].Recv(ctx, 0, hdr(0, 0), 64, discardSink{})
			if err == nil || !strings.Contains(err.Error(), "wire-protection") && !strings.Contains(err.Error(), "wire protection") {
				t.Errorf("got %v, want an error about the wire protection", err)
			}
		})
	}
}

// TestWireAutoDisagreement: a relay that makes the two ends of a link
// resolve auto differently (rank 1 dials the relay on its own loopback
// address, so it sees a local peer and would send none; the relay reaches
// rank 0 from 127.0.0.2, which rank 0 is told is another host, so it
// would send mac, whose tags the relay could strip) is refused at the
// handshake, on both ranks, with an error naming both ends' views.
func TestWireAutoDisagreement(t *testing.T) {
	needSecondLoopback(t)
	cfgs, _ := newRelay(t, otherHost, nil)
	for i := range cfgs {
		cfgs[i].WireProtection = WireAuto
		cfgs[i].ConnectTimeout = 5 * time.Second
	}
	// Rank 0 judges by address alone: 127.0.0.2 is another host to it.
	cfgs[0].sameHost = func(l, r net.Addr) bool { return l.(*net.TCPAddr).IP.Equal(r.(*net.TCPAddr).IP) }
	start := time.Now()
	conns, errs := dialConfigs(cfgs)
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		for _, want := range []string{"wire protection disagreement",
			"rank 0 resolved -wire-protection auto to mac for this link (peer 127.0.0.2 looks remote)",
			"rank 1 resolved -wire-protection auto to none for this link (peer 127.0.0.1 looks local)"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("rank %d: got %v, want it to say %q", r, err, want)
			}
		}
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %v to refuse", el)
	}
}
