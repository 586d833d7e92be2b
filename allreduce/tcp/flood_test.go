package tcp

import (
	"context"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// How a flooding stranger behaves on each connection it opens.
type floodMode int

const (
	floodSilent  floodMode = iota // connect and never speak
	floodGarbage                  // connect, send random bytes, hold
	floodHello                    // connect, send a well-formed hello, never prove
	floodMixed                    // each of the above in turn
)

func (m floodMode) String() string {
	return [...]string{"silent", "garbage", "hello", "mixed"}[m]
}

// flood opens connections to addr as fast as it can and holds up to hold
// of them open, closing its oldest to open more, until ctx ends. It
// returns the number of connections it opened.
func flood(ctx context.Context, addr string, mode floodMode, hold int) int {
	return floodFrom(ctx, addr, nil, mode, hold)
}

// floodFrom is flood from the local address from (nil: any).
func floodFrom(ctx context.Context, addr string, from net.IP, mode floodMode, hold int) int {
	rng := rand.New(rand.NewPCG(3, 4))
	garbage := make([]byte, 512)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	hello := strangerHello(ProtocolVersion)
	held := make([]net.Conn, 0, hold)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	d := net.Dialer{Timeout: time.Second}
	if from != nil {
		d.LocalAddr = &net.TCPAddr{IP: from}
	}
	opened := 0
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			continue
		}
		m := mode
		if m == floodMixed {
			m = floodMode(opened % 3)
		}
		opened++
		switch m {
		case floodGarbage:
			_, _ = c.Write(garbage)
		case floodHello:
			_, _ = c.Write(hello)
		}
		if len(held) == hold {
			held[0].Close()
			held = append(held[:0], held[1:]...)
		}
		held = append(held, c)
	}
	return opened
}

// formUnderFlood forms a mesh of n ranks; ranks 0..n-2 start first, then
// (with mode >= 0) a stranger floods every listening rank, one goroutine
// per rank, and after settle the last rank starts. It returns the time
// from the last rank's start until every rank's Dial returned, and the
// connections the stranger opened.
func formUnderFlood(t *testing.T, n int, mode floodMode, flooding bool, settle time.Duration) (time.Duration, int) {
	t.Helper()
	store := rendezvous.NewMemStore()
	conns := make([]*Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	dial := func(r int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := testConfig(r, n, store)
			cfg.ConnectTimeout = 30 * time.Second
			conns[r], errs[r] = Dial(context.Background(), cfg)
		}()
	}
	for r := range n - 1 {
		dial(r)
	}
	ctx, stop := context.WithCancel(context.Background())
	var opened atomic.Int64
	var floods sync.WaitGroup
	for r := range n - 1 {
		v, err := store.Get(context.Background(), addrKey("test", r))
		if err != nil {
			t.Fatal(err)
		}
		if flooding {
			floods.Add(1)
			go func() {
				defer floods.Done()
				opened.Add(int64(flood(ctx, string(v), mode, 500)))
			}()
		}
	}
	time.Sleep(settle)
	start := time.Now()
	dial(n - 1)
	wg.Wait()
	took := time.Since(start)
	stop()
	floods.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%v flood: rank %d: %v", mode, r, err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	return took, int(opened.Load())
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestFloodDuringFormation: a stranger opens connections to every
// listening rank as fast as it can and holds them (silent, speaking
// garbage, or a well-formed hello with no proof to follow), while 4 ranks
// form: the job forms, and within 2 s more of its last rank's arrival than
// without the flood. RINGDDP_FLOOD_RUNS=5 takes the medians of 5 runs of
// each (default 1).
func TestFloodDuringFormation(t *testing.T) {
	if testing.Short() {
		t.Skip("floods loopback for seconds")
	}
	runs := 1
	if v, err := strconv.Atoi(os.Getenv("RINGDDP_FLOOD_RUNS")); err == nil && v > 0 {
		runs = v
	}
	const n = 4
	const settle = 300 * time.Millisecond
	var quiet []time.Duration
	for range runs {
		d, _ := formUnderFlood(t, n, 0, false, settle)
		quiet = append(quiet, d)
	}
	base := median(quiet)
	t.Logf("no flood: last rank to formed mesh %v (median of %v)", base, quiet)
	for _, mode := range []floodMode{floodSilent, floodGarbage, floodHello, floodMixed} {
		var took []time.Duration
		var rates []string
		for range runs {
			d, opened := formUnderFlood(t, n, mode, true, settle)
			took = append(took, d)
			rates = append(rates, strconv.Itoa(int(float64(opened)/(settle+d).Seconds())))
		}
		med := median(took)
		t.Logf("%v flood (%s connections/s over %d listening ranks): %v (median of %v), %v more than without",
			mode, strings.Join(rates, ", "), n-1, med, took, med-base)
		if extra := med - base; extra > 2*time.Second {
			t.Errorf("%v flood: the mesh formed %v after the last rank's arrival, %v more than without", mode, med, extra)
		}
	}
}

// TestFloodTimeoutSaysWhy: when the mesh does not form (a rank never
// comes) under a stranger's flood, the error says how many connections
// were turned away, why and from where.
func TestFloodTimeoutSaysWhy(t *testing.T) {
	addr, errc := listenAlone(t, func(c *Config) {
		c.ConnectTimeout = 1500 * time.Millisecond
		c.HandshakeTimeout = 300 * time.Millisecond
	})
	// A few silent connections that time out, then floods: silent ones,
	// more than the rank holds, and garbage.
	for range 3 {
		if c, err := net.Dial("tcp", addr); err == nil {
			defer c.Close()
		}
	}
	time.Sleep(500 * time.Millisecond)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go flood(ctx, addr, floodSilent, 4*maxPendingHandshakes)
	go flood(ctx, addr, floodGarbage, 8)
	err := <-errc
	stop()
	t.Logf("%v", err)
	for _, want := range []string{"no connection with rank(s) 1", "turned away", "dropped to make room (over 64 waiting",
		"timed out after 300ms", "not the protocol", "from 127.0.0.1 (", "latest: 127.0.0.1:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want the error to mention %q", want)
		}
	}
}

// otherHost is a loopback address other than 127.0.0.1, which tests dial
// from to look like another host.
var otherHost = net.IPv4(127, 0, 0, 2)

// needSecondLoopback skips the test where this host cannot dial from
// otherHost (Linux can; macOS has only 127.0.0.1 unless configured).
func needSecondLoopback(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: otherHost}, Timeout: time.Second}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Skipf("cannot dial from %v: %v", otherHost, err)
	}
	c.Close()
}

// slowConn delays each write: a dialer whose answers take a long round
// trip to arrive.
type slowConn struct {
	net.Conn
	delay time.Duration
}

func (c slowConn) Write(b []byte) (int, error) {
	time.Sleep(c.delay)
	return c.Conn.Write(b)
}

// TestFloodFromOneHostSparesAnother: while a stranger on 127.0.0.2 floods
// a listening rank with well-formed hellos (more than it holds waiting),
// the ten ranks above it dial from 127.0.0.1 with handshakes whose every
// message takes 200 ms to arrive. Each handshake is tried once; all ten
// must complete, since the listener evicts from the host holding the most
// waiting connections, and the mesh forms.
func TestFloodFromOneHostSparesAnother(t *testing.T) {
	const n = 11
	const delay = 200 * time.Millisecond
	needSecondLoopback(t)
	addr, errc := listenAlone(t, func(c *Config) {
		c.Size = n
		c.ConnectTimeout = 10 * time.Second
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var opened atomic.Int64
	var floods sync.WaitGroup
	for range 2 {
		floods.Add(1)
		go func() {
			defer floods.Done()
			opened.Add(int64(floodFrom(ctx, addr, otherHost, floodHello, 4*maxPendingHandshakes)))
		}()
	}
	time.Sleep(300 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make([]error, n)
	conns := make([]net.Conn, n)
	for r := 1; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				errs[r] = err
				return
			}
			conns[r] = nc
			_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
			p := &handshakeParams{secret: testSecret, mode: modeHMAC, size: n, rank: r, runID: "test", wire: wireCode(DefaultWireProtection)}
			_, _, errs[r] = dialHandshake(slowConn{nc, delay}, p, 0)
		}()
	}
	wg.Wait()
	failed := 0
	for r := 1; r < n; r++ {
		if errs[r] != nil {
			failed++
			t.Errorf("rank %d's slow handshake: %v", r, errs[r])
		}
	}
	err := <-errc
	stop()
	floods.Wait()
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	t.Logf("%d of %d slow handshakes completed under a flood of %d connections from 127.0.0.2", n-1-failed, n-1, opened.Load())
	if err != nil {
		t.Errorf("listening rank: %v", err)
	}
}
