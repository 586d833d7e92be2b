package tcp

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/transporthelp"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
)

var testSecret = []byte("correct horse battery staple")

func testConfig(rank, size int, store rendezvous.Store) Config {
	return Config{
		Rank:           rank,
		Size:           size,
		Store:          store,
		RunID:          "test",
		Secret:         testSecret,
		Timeout:        10 * time.Second,
		ConnectTimeout: 10 * time.Second,
	}
}

// dialConfigs dials every config concurrently and returns the results by index.
func dialConfigs(cfgs []Config) ([]*Conn, []error) {
	conns := make([]*Conn, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[i], errs[i] = Dial(context.Background(), cfgs[i])
		}()
	}
	wg.Wait()
	return conns, errs
}

// dialMesh makes n connected ranks over loopback; mod adjusts each config.
// They are closed at cleanup.
func dialMesh(t testing.TB, n int, mod func(*Config)) []*Conn {
	t.Helper()
	store := rendezvous.NewMemStore()
	return transporthelp.DialAll(t, n, func(ctx context.Context, r int) (*Conn, error) {
		cfg := testConfig(r, n, store)
		if mod != nil {
			mod(&cfg)
		}
		return Dial(ctx, cfg)
	})
}

// bufSink copies into dst and records the piece boundaries.
type bufSink struct {
	dst    []byte
	pieces []int
	record bool
}

func (s *bufSink) Consume(off int, p []byte) {
	copy(s.dst[off:], p)
	if s.record {
		s.pieces = append(s.pieces, len(p))
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b[:min(n, 4099)] {
		b[i] = byte(i*7) + seed
	}
	for done := min(n, 4099); done < n; done *= 2 {
		copy(b[done:], b[:done])
	}
	return b
}

func hdr(seq uint64, step uint32) transport.Header {
	return transport.Header{Group: 1, Seq: seq, Kind: 1, DType: 1, Op: 1, Root: -1, Count: 12345, Step: step}
}

func ctxT(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// within fails the test if f takes longer than d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	start := time.Now()
	f()
	if el := time.Since(start); el > d {
		t.Errorf("%s took %v, want under %v", what, el, d)
	}
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return fmt.Sprint(err)
}
