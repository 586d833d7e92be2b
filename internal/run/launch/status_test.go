package launch

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The status pipe's lines: what ranks write with Status, the launcher
// reads back; a resume carries the ZeRO-1 re-shard's bytes (the sum of
// every rank's) or, under DDP, none; a later resume without bytes clears
// an earlier one's.
func TestStatusPipeResume(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	s := &Status{f: w}
	s.Started(5)
	s.Stepped(6)
	s.Resumed(6, []int64{100, 0, 23})
	s.Resumed(9, nil)
	require.NoError(t, s.Close())
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, "start 5\nstep 6\nresume 6 123\nresume 9\n", string(b))

	p := newProgress()
	p.read(strings.NewReader("start 5\nstep 6\nresume 6 123\n"))
	step, at, reshard := p.lastResume()
	require.Equal(t, int64(6), step)
	require.False(t, at.IsZero())
	require.Equal(t, int64(123), reshard)

	p = newProgress()
	p.read(strings.NewReader(string(b)))
	step, _, reshard = p.lastResume()
	require.Equal(t, int64(9), step)
	require.Equal(t, int64(-1), reshard, "DDP's resume after a ZeRO-1 one: no re-shard")
	start, last, _ := p.snapshot()
	require.Equal(t, int64(5), start)
	require.Equal(t, int64(6), last)
}

// Lines that are not status lines are ignored, not misread: a negative
// or non-numeric number, too many numbers, a second number on a line
// other than resume.
func TestStatusPipeBadLines(t *testing.T) {
	p := newProgress()
	p.read(strings.NewReader("resume 7 -3\nresume 7 x\nresume 7 1 2\nstep 4 9\nstep\nstart -1\nresume\nstep 3\n"))
	step, at, reshard := p.lastResume()
	require.Equal(t, int64(-1), step)
	require.True(t, at.IsZero())
	require.Equal(t, int64(-1), reshard)
	start, last, _ := p.snapshot()
	require.Equal(t, int64(-1), start)
	require.Equal(t, int64(3), last)
}
