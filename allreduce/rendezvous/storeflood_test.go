package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// startFlood has a stranger hold total connections to addr open, opening
// a new one from one of workers goroutines as soon as the server closes
// one, as fast as it can: the attack of issue 15, which held every slot.
// Half the connections send the first bytes of a handshake and stall, the
// others send nothing. stop ends it and closes every connection.
func startFlood(addr string, workers, total int) (opened *atomic.Int64, stop func()) {
	return startFloodFrom(addr, nil, workers, total)
}

// startFloodFrom is startFlood from the local address from (nil: any).
func startFloodFrom(addr string, from net.Addr, workers, total int) (opened *atomic.Int64, stop func()) {
	opened = new(atomic.Int64)
	quit := make(chan struct{})
	slots := make(chan struct{}, total)
	for i := 0; i < total; i++ {
		slots <- struct{}{}
	}
	var mu sync.Mutex
	open := make(map[net.Conn]struct{}) // nil once stopped
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: time.Second, LocalAddr: from}
			for {
				select {
				case <-quit:
					return
				case <-slots:
				}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					slots <- struct{}{}
					time.Sleep(time.Millisecond)
					continue
				}
				if n := opened.Add(1); n%2 == 1 {
					c.Write([]byte("RDZS\x00"))
				}
				mu.Lock()
				if open == nil {
					mu.Unlock()
					c.Close()
					return
				}
				open[c] = struct{}{}
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					io.Copy(io.Discard, c) // until the server closes it
					c.Close()
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					slots <- struct{}{}
				}()
			}
		}()
	}
	return opened, func() {
		close(quit)
		mu.Lock()
		for c := range open {
			c.Close()
		}
		open = nil
		mu.Unlock()
		wg.Wait()
	}
}

// formJob is a job of world ranks forming through the store at addr: each
// rank connects, publishes its address, counts itself in and reads every
// rank's address. It returns when the slowest rank is done.
func formJob(addr string, world int, job string) (time.Duration, error) {
	start := time.Now()
	cfg := testStoreConfig()
	cfg.Timeout = 30 * time.Second
	errs := make(chan error, world)
	for r := 0; r < world; r++ {
		go func() {
			errs <- func() error {
				ctx := context.Background()
				c, err := DialStore(ctx, addr, cfg)
				if err != nil {
					return err
				}
				defer c.Close()
				if err := c.Set(ctx, fmt.Sprintf("%s/addr/%d", job, r), []byte(fmt.Sprintf("10.0.0.%d:4000", r))); err != nil {
					return err
				}
				if _, err := c.Add(ctx, job+"/joined", 1); err != nil {
					return err
				}
				for p := 0; p < world; p++ {
					if _, err := c.Get(ctx, fmt.Sprintf("%s/addr/%d", job, p)); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	var first error
	for r := 0; r < world; r++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return time.Since(start), first
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestStoreFloodDuringRendezvous: a stranger flooding the store with
// connections (more than MaxConns held open, a new one as soon as the
// server closes one) does not stop a job from forming, nor delay it by
// more than 2 s; and the store can say what it turned away.
func TestStoreFloodDuringRendezvous(t *testing.T) {
	const world = 4
	rounds := 5
	if testing.Short() {
		rounds = 3
	}
	srv := startServer(t, testStoreConfig()) // default limits
	addr := srv.Addr().String()
	var clean, flooded []time.Duration
	for r := 0; r < rounds; r++ {
		d, err := formJob(addr, world, fmt.Sprintf("clean%d", r))
		if err != nil {
			t.Fatalf("without a flood: %v", err)
		}
		clean = append(clean, d)
	}
	floodStart := time.Now()
	opened, stop := startFlood(addr, 4, DefaultMaxConns+DefaultMaxPending)
	time.Sleep(300 * time.Millisecond) // every pending slot is the stranger's
	for r := 0; r < rounds; r++ {
		d, err := formJob(addr, world, fmt.Sprintf("flooded%d", r))
		if err != nil {
			stop()
			t.Fatalf("under a flood: %v (%s)", err, srv.TurnedAway())
		}
		flooded = append(flooded, d)
	}

	// A Get timing out tells its caller what the store turned away.
	cfg := testStoreConfig()
	cfg.Timeout = 500 * time.Millisecond
	var getErr error
	if c, err := DialStore(context.Background(), addr, cfg); err != nil {
		getErr = err
	} else {
		_, getErr = c.Get(context.Background(), "a rank that never came")
		c.Close()
	}
	rate := float64(opened.Load()) / time.Since(floodStart).Seconds()
	stop()

	mc, mf := median(clean), median(flooded)
	ta := srv.TurnedAway()
	t.Logf("%d-rank formation, median of %d: %v without a flood, %v under a flood of %.0f connections/s (%d opened; rounds %v vs %v)",
		world, rounds, mc.Round(time.Microsecond), mf.Round(time.Microsecond), rate, opened.Load(), clean, flooded)
	t.Logf("TurnedAway: %s", ta)
	if mf-mc > 2*time.Second {
		t.Errorf("the flood delayed formation by %v (median), want at most 2 s", mf-mc)
	}
	if ta.Evicted == 0 || len(ta.From) == 0 || ta.From[0].Host != "127.0.0.1" {
		t.Errorf("TurnedAway = %+v, want evictions from 127.0.0.1", ta)
	}
	if !errors.Is(getErr, ErrTimeout) || !strings.Contains(getErr.Error(), "turned away") || !strings.Contains(getErr.Error(), "127.0.0.1") {
		t.Errorf("a Get timing out after the flood: %v; want it to say what was turned away", getErr)
	} else {
		t.Logf("Get timing out: %v", getErr)
	}
	waitFor(t, func() bool { return srv.Stats().Conns == 0 })
}

// TestStoreEvictsBusiestHost: at the pending limit the server evicts from
// the host holding the most pending connections, not a lone newcomer from
// another host.
func TestStoreEvictsBusiestHost(t *testing.T) {
	s := newStoreServer(nil, testStoreConfig().withDefaults(), modeHMAC)
	add := func(host string) *serverConn {
		c, peer := net.Pipe()
		t.Cleanup(func() { c.Close(); peer.Close() })
		sc := &serverConn{Conn: c, host: host}
		sc.elem = s.pending.PushBack(sc)
		s.byHost[host]++
		s.conns[sc] = struct{}{}
		return sc
	}
	lone := add("10.0.0.2")
	flood := []*serverConn{add("10.0.0.9"), add("10.0.0.9"), add("10.0.0.9")}
	s.mu.Lock()
	v1, v2 := s.evictLocked("10.0.0.5"), s.evictLocked("10.0.0.5")
	s.mu.Unlock()
	if v1 != flood[0] || v2 != flood[1] || lone.evicted || !v1.evicted {
		t.Errorf("evicted %v, %v; want the flood's oldest two", v1.host, v2.host)
	}
	s.mu.Lock()
	v3, v4 := s.evictLocked("10.0.0.5"), s.evictLocked("10.0.0.5") // a tie: the oldest goes first
	v5 := s.evictLocked("10.0.0.5")
	s.mu.Unlock()
	if v3 != lone || v4 != flood[2] || v5 != nil || s.pending.Len() != 0 || len(s.byHost) != 0 || len(s.conns) != 0 {
		t.Errorf("then %v, %v, %v", v3, v4, v5)
	}
	// Their handshakes are cut short at once.
	if _, err := v1.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("evicted connection reads %v", err)
	}

	// A newcomer from a host that, counting it, holds as many pending
	// connections as the busiest evicts its own host's oldest, even when
	// another host's are older; from a host with none, the busiest's.
	slow := []*serverConn{add("10.0.0.1"), add("10.0.0.1")}
	flood = []*serverConn{add("10.0.0.9"), add("10.0.0.9")}
	s.mu.Lock()
	v6 := s.evictLocked("10.0.0.9") // 10.0.0.9 would hold 3 against 2
	v7 := s.evictLocked("10.0.0.9") // 2 against 2
	v8 := s.evictLocked("10.0.0.7") // none of its own: the oldest of the busiest
	s.mu.Unlock()
	if v6 != flood[0] || v7 != flood[1] || v8 != slow[0] {
		t.Errorf("newcomers from the flood evicted %v, %v; a third host %v", v6.host, v7.host, v8.host)
	}
}

// slowConn delays its first write: a client far away, or slow to compute
// its answer.
type slowConn struct {
	net.Conn
	delay time.Duration
	once  sync.Once
}

func (c *slowConn) Write(b []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.delay) })
	return c.Conn.Write(b)
}

// TestStoreFloodSparesOtherHosts: the review's attack. A flood of
// connections from 127.0.0.2 does not evict the handshakes of another
// host, 127.0.0.1, whose clients answer the server's hello only after
// 200 ms: every one of them authenticates, with the default limits (10
// slow clients) and with MaxPending 8 (4 slow clients, half the slots:
// the flood then holds as many as they do).
func TestStoreFloodSparesOtherHosts(t *testing.T) {
	if c, err := net.Dial("tcp", "127.0.0.2:1"); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
		t.Skipf("no 127.0.0.2 here: %v", err)
	} else if c != nil {
		c.Close()
	}
	for _, c := range []struct{ maxPending, slow int }{{DefaultMaxPending, 10}, {8, 4}} {
		cfg := testStoreConfig()
		cfg.MaxPending = c.maxPending
		srv := startServer(t, cfg)
		failed, ta, opened := slowHandshakesUnderFlood(t, srv, c.slow)
		t.Logf("MaxPending %d: %d of %d slow handshakes from 127.0.0.1 failed under a flood from 127.0.0.2 (%d connections); %s",
			c.maxPending, failed, c.slow, opened, ta)
		if failed > 0 {
			t.Errorf("MaxPending %d: %d of %d slow handshakes from another host were dropped", c.maxPending, failed, c.slow)
		}
		for _, h := range ta.From {
			if h.Host == "127.0.0.1" {
				t.Errorf("MaxPending %d: the store turned away %d connections of 127.0.0.1", c.maxPending, h.Count)
			}
		}
	}
}

// slowHandshakesUnderFlood floods srv from 127.0.0.2 until its pending
// slots are full, then authenticates n clients from 127.0.0.1 that answer
// after 200 ms, and returns how many failed, what the server turned away,
// and how many connections the flood opened.
func slowHandshakesUnderFlood(t *testing.T, srv *StoreServer, n int) (failed int, ta TurnedAway, opened int64) {
	count, stop := startFloodFrom(srv.Addr().String(), &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, 4, DefaultMaxConns+DefaultMaxPending)
	defer stop()
	waitFor(t, func() bool { return srv.Stats().Pending == srv.cfg.MaxPending })
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			c, err := net.DialTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, srv.Addr().(*net.TCPAddr))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			_, err = clientHandshake(&slowConn{Conn: c, delay: 200 * time.Millisecond}, testSecret, modeHMAC)
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			failed++
			t.Logf("slow handshake: %v", err)
		}
	}
	return failed, srv.TurnedAway(), count.Load()
}
