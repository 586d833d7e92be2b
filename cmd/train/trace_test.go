package main

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/trace"
)

// checkTrace reads a -trace file and checks that every rank has its track
// with steps, buckets and an evaluation, and that the recorded clock
// offsets are within 1 ms (one host).
func checkTrace(t *testing.T, path string, ranks int) {
	t.Helper()
	f, err := trace.ReadFile(path)
	require.NoError(t, err)
	seen := map[int]map[string]bool{}
	for _, e := range f.Events {
		require.NotEmpty(t, e.Name)
		require.Contains(t, []string{"X", "i", "M"}, e.Ph)
		if seen[e.Pid] == nil {
			seen[e.Pid] = map[string]bool{}
		}
		seen[e.Pid][e.Name] = true
	}
	for r := range ranks {
		for _, name := range []string{"process_name", "step", "forward", "backward", "optimizer", "bucket 0", "evaluation"} {
			require.True(t, seen[r][name], "rank %d has no %q event", r, name)
		}
	}
	require.Len(t, f.Other.ClockOffsetNanos, ranks)
	for r, off := range f.Other.ClockOffsetNanos {
		require.Less(t, time.Duration(off).Abs(), time.Millisecond, "rank %s's clock offset", r)
	}
}

// -trace under the tcp launcher: each rank writes its part, the launcher
// merges them into one file on rank 0's clock and removes the parts.
func TestTraceTCP(t *testing.T) {
	data := writeMNISTDir(t)
	path := filepath.Join(t.TempDir(), "run.json")
	out, err := runTrain(t, "-transport", "tcp", "-data", data, "-ranks", "2", "-batch", "20", "-epochs", "1",
		"-hidden", "8", "-quiet", "-trace", path)
	require.NoError(t, err, out)
	checkTrace(t, path, 2)
	parts, _ := filepath.Glob(path + ".rank*")
	require.Empty(t, parts, "rank files left")
	require.Contains(t, out, "trace: "+path)
}

// -trace in process writes one file; -out draws the step-time breakdown
// and the loss per step; the epoch line names the slowest rank, rank 1,
// which sleeps 25 ms after each step (long enough for a loaded host).
func TestTraceAndPlotsInproc(t *testing.T) {
	data := writeMNISTDir(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "run.json")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Setenv(faultsVar, "slow:1:25")
	var buf bytes.Buffer
	err := runWith(ctx, []string{"-data", data, "-ranks", "3", "-batch", "24", "-epochs", "2",
		"-hidden", "8", "-quiet", "-trace", path, "-out", dir}, &buf, runEnv{adjust: testFaults(func(k string) string {
		if k == "RANK" {
			return "1"
		}
		return os.Getenv(k)
	})})
	out := buf.String()
	require.NoError(t, err, out)
	require.Contains(t, out, "slowest rank 1: ")
	checkTrace(t, path, 3)
	require.Regexp(t, `slowest rank \d: last in \d+% of steps, median [0-9.]+ ms behind`, out)
	for _, name := range []string{plotFile, breakdownFile} {
		f, err := os.Open(filepath.Join(dir, name))
		require.NoError(t, err)
		img, err := png.Decode(f)
		f.Close()
		require.NoError(t, err, name)
		require.Greater(t, img.Bounds().Dx(), 100, name)
	}
	require.True(t, strings.Contains(out, "step_time.png"), out)
}
