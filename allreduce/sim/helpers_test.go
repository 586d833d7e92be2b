package sim_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/internal/transporthelp"
	"github.com/ringddp/ringddp/allreduce/sim"
)

// newWorld makes a world that the test's cleanup closes.
func newWorld(t testing.TB, cfg sim.Config) *sim.World {
	t.Helper()
	w, err := sim.NewWorld(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// The fixtures of tests that block on a call, shared with package
// inproc's tests.
var (
	goErr = transporthelp.Go
	wait  = transporthelp.Wait
	hdr   = transporthelp.Header
)

type sink = transporthelp.Sink

// placer is a transport.Placer over dst.
type placer struct{ dst []byte }

func (p *placer) Place(n int) []byte        { return p.dst[:n] }
func (p *placer) Consume(off int, b []byte) { copy(p.dst[off:], b) }

var bg = context.Background()
