package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/run/trainer"
)

// A run stopped by -max-steps inside an epoch reports that epoch as a full
// one is reported, marked partial: the text line, the JSON object and the
// metrics.csv row.
func TestMaxStepsPrintsPartialEpoch(t *testing.T) {
	data := writeMNISTDir(t) // 400 training examples: 10 steps of 40 per epoch
	args := []string{"-data", data, "-ranks", "2", "-batch", "40", "-epochs", "2", "-hidden", "8", "-max-steps", "15"}

	text, err := runTrain(t, append(args, "-quiet")...)
	require.NoError(t, err)
	require.Contains(t, text, "epoch 1/2  train_loss ")
	require.Contains(t, text, "epoch 2/2 (partial: step 5/10)  train_loss ")
	require.Contains(t, text, "% overlapped | ")
	require.Contains(t, text, "\n  per step: compute ")
	require.Contains(t, text, "stopped at -max-steps 15 (epoch 2, step 5)")

	out := t.TempDir()
	js, err := runTrain(t, append(args, "-json", "-out", out)...)
	require.NoError(t, err)
	rows := jsonLines(t, js)
	require.Len(t, rows, 2)
	require.Equal(t, false, rows[0]["partial"])
	require.Equal(t, 10.0, rows[0]["step_in_epoch"])
	part := rows[1]
	require.Equal(t, true, part["partial"])
	require.Equal(t, 2.0, part["epoch"])
	require.Equal(t, 5.0, part["steps"])
	require.Equal(t, 5.0, part["step_in_epoch"])
	require.Equal(t, 10.0, part["steps_per_epoch"])
	require.Equal(t, 15.0, part["global_step"])
	require.Equal(t, 61.0, part["test_count"])
	require.Greater(t, part["samples_per_sec"], 0.0)
	require.Greater(t, part["comm_seconds"], 0.0)

	f, err := os.Open(filepath.Join(out, metricsFile))
	require.NoError(t, err)
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	require.NoError(t, err)
	require.Len(t, recs, 3)
	col := slices.Index(recs[0], "partial")
	require.GreaterOrEqual(t, col, 0)
	require.Equal(t, "false", recs[1][col])
	require.Equal(t, "true", recs[2][col])
	require.Contains(t, recs[0], "comm_seconds")
}

func TestEpochX(t *testing.T) {
	require.Equal(t, 2.0, epochX(trainer.EpochMetrics{Epoch: 2, StepInEpoch: 10, StepsPerEpoch: 10}))
	require.Equal(t, 1.25, epochX(trainer.EpochMetrics{Epoch: 2, Partial: true, StepInEpoch: 5, StepsPerEpoch: 20}))
}

// The epoch's headline is short, as PyTorch's examples print it; the
// breakdown's second line adds up (comm = hidden + comm wait, so comm is
// never below comm wait) and the slowest rank has a line only when named.
func TestPrintEpoch(t *testing.T) {
	m := trainer.EpochMetrics{Epoch: 1, Steps: 200, StepInEpoch: 200, StepsPerEpoch: 200, TrainLoss: 0.2841,
		TestLoss: 0.1298, TestAccuracy: 0.9512, SamplesPerSec: 12345.4, EpochSeconds: 4.2, EvalSeconds: 0.9,
		ComputeSeconds: 2.84, CommWaitSeconds: 0.62, CommHiddenSeconds: 0.2, CommSeconds: 0.82, OptimizerSeconds: 0.12,
		CommBytesPerStep: 1415577, OptStateBytesPerRank: 940544, Ranks: 4, SlowestRank: -1}
	var b strings.Builder
	printEpoch(&b, m, 3)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	require.Len(t, lines, 2, b.String())
	require.Equal(t, "epoch 1/3  train_loss 0.2841  test_loss 0.1298  test_acc 95.12%  12,345 samples/s  4.2s (eval 0.9s)", lines[0])
	require.Equal(t, "  per step: compute 14.2 ms + comm wait 3.1 ms + optimizer 0.6 ms | comm 4.1 ms, 24% overlapped | 1.35 MiB sent, 918.5 KiB opt state per rank", lines[1])

	m.SlowestRank, m.SlowestRankShare, m.SlowestRankLagMs = 2, 0.6, 5.43
	b.Reset()
	printEpoch(&b, m, 3)
	require.Contains(t, b.String(), "\n  slowest rank 2: last in 60% of steps, median 5.4 ms behind (chance: 25%)\n")
}

func TestThousands(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 7.4: "7", 999.5: "1,000", 12345.4: "12,345", 1234567: "1,234,567", -4321: "-4,321"} {
		require.Equal(t, want, thousands(x), "%v", x)
	}
}

// In a run's JSON the figures are consistent: comm is hidden + comm wait,
// hidden fits in compute (buckets of 100 bytes: several, some
// communicated during the backward pass).
func TestBreakdownConsistent(t *testing.T) {
	data := writeMNISTDir(t)
	out, err := runTrain(t, "-data", data, "-ranks", "3", "-batch", "24", "-epochs", "1", "-hidden", "8", "-bucket-mb", "0.0001", "-json")
	require.NoError(t, err, out)
	for _, r := range jsonLines(t, out) {
		f := func(k string) float64 { return r[k].(float64) }
		require.InDelta(t, f("comm_seconds"), f("comm_hidden_seconds")+f("comm_wait_seconds"), 1e-9, "%v", r)
		require.GreaterOrEqual(t, f("comm_seconds"), f("comm_wait_seconds"))
		require.GreaterOrEqual(t, f("comm_hidden_seconds"), 0.0)
		require.LessOrEqual(t, f("comm_hidden_seconds"), f("compute_seconds"))
	}
}

// Without -out a run writes its files into a new directory of its own
// under the runs directory and says where, as it says where -cpuprofile
// went; -out "" writes none.
func TestDefaultOutDir(t *testing.T) {
	data := writeMNISTDir(t)
	runs := filepath.Join(t.TempDir(), "runs")
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	args := []string{"-data", data, "-ranks", "2", "-batch", "40", "-epochs", "1", "-hidden", "8", "-quiet"}
	run := func(extra ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out bytes.Buffer
		require.NoError(t, runWith(ctx, append(args, extra...), &out, runEnv{runsDir: runs}))
		return out.String()
	}
	out := run("-cpuprofile", prof)
	dirs, err := os.ReadDir(runs)
	require.NoError(t, err)
	require.Len(t, dirs, 1)
	dir := filepath.Join(runs, dirs[0].Name())
	_, err = time.Parse(runDirLayout, dirs[0].Name())
	require.NoError(t, err, "named by the start time")
	for _, f := range []string{metricsFile, plotFile, breakdownFile} {
		require.FileExists(t, filepath.Join(dir, f))
	}
	require.Contains(t, out, "metrics: "+filepath.Join(dir, metricsFile)+", plots: ")
	require.Contains(t, out, "cpu profile: "+prof+" (go tool pprof)\n")
	st, err := os.Stat(prof)
	require.NoError(t, err)
	require.Greater(t, st.Size(), int64(0))

	out = run("-out", "")
	require.NotContains(t, out, "metrics: ")
	dirs, err = os.ReadDir(runs)
	require.NoError(t, err)
	require.Len(t, dirs, 1, "-out \"\" wrote a directory")
}

// Runs that start in the same second get directories of their own.
func TestNewRunDir(t *testing.T) {
	root := filepath.Join(t.TempDir(), "runs")
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)
	a, err := newRunDir(root, start)
	require.NoError(t, err)
	b, err := newRunDir(root, start)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "2026-01-02_03-04-05"), a)
	require.Equal(t, a+"-2", b)
	require.DirExists(t, b)
}

// The writer ends with the newest submission written, and reports a
// failure to write.
func TestOutWriter(t *testing.T) {
	dir := t.TempDir()
	w := &outWriter{dir: dir, title: "run"}
	all := plotEpochs(4)
	for n := 1; n <= 4; n++ {
		w.submit(all[:n], nil)
	}
	require.NoError(t, w.wait())
	f, err := os.Open(filepath.Join(dir, metricsFile))
	require.NoError(t, err)
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	require.NoError(t, err)
	require.Len(t, recs, 5)

	notDir := filepath.Join(dir, metricsFile) // a file
	bad := &outWriter{dir: notDir}
	bad.submit(all, nil)
	require.Error(t, bad.wait())
}
