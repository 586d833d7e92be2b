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
// every rank's) and each rank's part or, under DDP, none; a later resume
// without bytes clears an earlier one's.
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
	zeroLines := "resume 6 123\nreshard 0 100\nreshard 1 0\nreshard 2 23\n"
	require.Equal(t, "start 5\nstep 6\n"+zeroLines+"resume 9\n", string(b))

	p := newProgress()
	p.read(strings.NewReader("start 5\nstep 6\n" + zeroLines))
	step, at, reshard, sent := p.lastResume()
	require.Equal(t, int64(6), step)
	require.False(t, at.IsZero())
	require.Equal(t, int64(123), reshard)
	require.Equal(t, []int64{100, 0, 23}, sent)

	p = newProgress()
	p.read(strings.NewReader(string(b)))
	step, _, reshard, sent = p.lastResume()
	require.Equal(t, int64(9), step)
	require.Equal(t, int64(-1), reshard, "DDP's resume after a ZeRO-1 one: no re-shard")
	require.Nil(t, sent)
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
	step, at, reshard, _ := p.lastResume()
	require.Equal(t, int64(-1), step)
	require.True(t, at.IsZero())
	require.Equal(t, int64(-1), reshard)
	start, last, _ := p.snapshot()
	require.Equal(t, int64(-1), start)
	require.Equal(t, int64(3), last)
}

// Each rank's part of a re-shard is kept only when it is whole: every
// rank in order after a ZeRO-1 resume, summing to its bytes. Parts out of
// order, missing, summing to another total, before any resume or after a
// DDP one, or malformed, leave the total alone and no parts.
func TestStatusPipeReshardParts(t *testing.T) {
	for _, c := range []struct {
		lines string
		total int64
		want  []int64
	}{
		{"resume 6 30\nreshard 0 10\nreshard 1 20\n", 30, []int64{10, 20}},
		{"resume 6 30\nreshard 1 20\nreshard 0 10\n", 30, nil},
		{"resume 6 30\nreshard 0 10\n", 30, nil},
		{"resume 6 30\nreshard 0 10\nreshard 1 21\n", 30, nil},
		{"reshard 0 10\nresume 6 10\n", 10, nil},
		{"resume 6\nreshard 0 0\n", -1, nil},
		{"resume 6 30\nreshard 0 10\nreshard 1 -20\nreshard 1 20 4\nreshard 1\nreshard 1 20\n", 30, []int64{10, 20}},
		{"resume 6 30\nreshard 0 10\nreshard 1 20\nresume 7 5\nreshard 0 5\n", 5, []int64{5}},
	} {
		p := newProgress()
		p.read(strings.NewReader(c.lines))
		_, _, reshard, sent := p.lastResume()
		require.Equal(t, c.total, reshard, "%q", c.lines)
		require.Equal(t, c.want, sent, "%q", c.lines)
	}
}
