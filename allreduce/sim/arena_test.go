package sim_test

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/sim"
)

func TestArena(t *testing.T) {
	w := newWorld(t, sim.Config{Ranks: 2, TimingOnly: true})
	c := w.Conn(0)
	b := w.Buffer(100)
	require.Len(t, b, 100)
	require.True(t, c.Virtual(b))
	require.True(t, c.Virtual(b[10:20]))
	require.False(t, c.Virtual(b[:0]))
	require.False(t, c.Virtual(make([]byte, 100)))
	require.False(t, c.Virtual(nil))
	v := c.VirtualBytes(64)
	require.Len(t, v, 64)
	require.True(t, w.Conn(1).Virtual(v))
	// A larger buffer is a new mapping; the old one stays virtual.
	big := w.Buffer(8 << 20)
	require.Len(t, big, 8<<20)
	require.True(t, c.Virtual(big[8<<20-1:]))
	require.True(t, c.Virtual(b))
	require.Nil(t, w.Buffer(-1))
	require.Empty(t, w.Buffer(0))
	require.NoError(t, w.Close())
	require.Nil(t, w.Buffer(8))
	require.True(t, c.Virtual(b), "a buffer handed out before Close stays virtual")

	// Real-payload mode: ordinary memory, no virtual bytes.
	r := newWorld(t, sim.Config{Ranks: 1})
	rb := r.Buffer(16)
	require.Len(t, rb, 16)
	rb[0] = 1
	require.False(t, r.Conn(0).Virtual(rb))
	require.Nil(t, r.Conn(0).VirtualBytes(16))
}

// TestArenaFaults: touching the arena faults (linux).
func TestArenaFaults(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the arena is PROT_NONE on linux")
	}
	w := newWorld(t, sim.Config{Ranks: 1, TimingOnly: true})
	b := w.Buffer(4096)
	faulted := func() (ok bool) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { ok = recover() != nil }()
		touched = b[100]
		return false
	}()
	require.True(t, faulted, "reading the arena did not fault")
}

// touched keeps the read of TestArenaFaults from being optimised away.
var touched byte

// recording is a sink that notes every call.
type recording struct {
	dst   []byte
	calls int
}

func (r *recording) Consume(off int, p []byte) { r.calls++; copy(r.dst[off:], p) }

type recordingPlacer struct{ recording }

func (r *recordingPlacer) Place(n int) []byte { r.calls++; return r.dst[:n] }

func TestVirtualPayload(t *testing.T) {
	const n = 1 << 20
	cfg := sim.Config{Ranks: 2, LocalSize: 1, TimingOnly: true, Model: cost.Model{Intra: intra, Inter: inter, Gamma: gamma}}
	w := newWorld(t, cfg)
	p := w.Buffer(n)
	// Into a reducing sink: not called; α + nβ + nγ charged.
	require.NoError(t, w.Conn(0).Send(bg, 1, hdr(0), p))
	near(t, n*inter.Beta, w.Now(0), "sender")
	red := &recording{dst: bytes.Repeat([]byte{7}, n)}
	require.NoError(t, w.Conn(1).Recv(bg, 0, hdr(0), n, red))
	require.Zero(t, red.calls)
	require.Equal(t, byte(7), red.dst[n-1], "a real destination keeps its bytes")
	near(t, inter.Alpha+n*inter.Beta+n*gamma, w.Now(1), "reducing receiver")
	// Into a Placer: not called, no γ.
	require.NoError(t, w.Conn(1).Send(bg, 0, hdr(1), p))
	pl := &recordingPlacer{recording{dst: make([]byte, n)}}
	require.NoError(t, w.Conn(0).Recv(bg, 1, hdr(1), n, pl))
	require.Zero(t, pl.calls)
	near(t, max(n*inter.Beta, w.Now(1)-n*inter.Beta+inter.Alpha+n*inter.Beta), w.Now(0), "placing receiver")
	// A real payload into a Placer over the arena is not written.
	require.NoError(t, w.Conn(0).Send(bg, 1, hdr(2), []byte{1, 2, 3}))
	require.NoError(t, w.Conn(1).Recv(bg, 0, hdr(2), 3, &placer{dst: w.Buffer(3)}))
	// Real payloads still arrive in timing-only mode.
	require.NoError(t, w.Conn(0).Send(bg, 1, hdr(3), []byte{4, 5, 6}))
	s := &sink{}
	require.NoError(t, w.Conn(1).Recv(bg, 0, hdr(3), 3, s))
	require.Equal(t, []byte{4, 5, 6}, s.Got)
	// A virtual message checks its length like any other.
	require.NoError(t, w.Conn(0).Send(bg, 1, hdr(4), p[:16]))
	require.Error(t, w.Conn(1).Recv(bg, 0, hdr(4), 8, &sink{}))
}
