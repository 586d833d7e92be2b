package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/sim"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// newWorld makes a world that the test's cleanup closes.
func newWorld(t testing.TB, cfg sim.Config) *sim.World {
	t.Helper()
	w, err := sim.NewWorld(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// sink collects received bytes; it reduces (it is not a Placer).
type sink struct{ got []byte }

func (s *sink) Consume(off int, p []byte) { s.got = append(s.got[:off], p...) }

// placer is a transport.Placer over dst.
type placer struct{ dst []byte }

func (p *placer) Place(n int) []byte        { return p.dst[:n] }
func (p *placer) Consume(off int, b []byte) { copy(p.dst[off:], b) }

func hdr(step uint32) transport.Header {
	return transport.Header{Group: 1, Seq: 2, Kind: 1, DType: 1, Op: 1, Root: -1, Count: 4, Step: step}
}

// goErr runs fn on its own goroutine.
func goErr(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

func wait(t *testing.T, ch <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("still blocked after %v", d)
		return nil
	}
}

var bg = context.Background()
