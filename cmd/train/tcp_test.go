package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/internal/run/launch/selftest"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/safetensors"
)

// TestMain runs the tests, or, in a rank the tests' launcher started, the
// command with the faults RINGDDP_TEST_FAULTS asks for (faults_test.go).
func TestMain(m *testing.M) {
	selftest.Main(m, "train", func() {
		os.Exit(runMain(runEnv{ranks: selftest.RankCommand, adjust: testFaults(os.Getenv)}))
	})
}

// Training over tcp ranks in separate processes ends where training over
// in-process ranks does. With 2 ranks it is bitwise the same — loss and
// accuracy every epoch and the checkpoint (parameters and optimizer
// state) — since the ring's a+b and the in-process direct sum are the same
// float32 additions. With 3 the ring adds in another order than the direct
// algorithm, so the results agree to rounding only (measured: relative
// differences around 1e-8 in the losses, and a different checkpoint).
func TestTCPMatchesInproc(t *testing.T) {
	data := writeMNISTDir(t)
	for _, ranks := range []string{"2", "3"} {
		t.Run("ranks="+ranks, func(t *testing.T) {
			dir := t.TempDir()
			train := func(transport string) ([]map[string]any, string) {
				ck := filepath.Join(dir, transport+".safetensors")
				out, err := runTrain(t, "-transport", transport, "-data", data, "-ranks", ranks, "-batch", "24", "-epochs", "2",
					"-hidden", "16", "-lr", "0.05", "-eval-batch", "25", "-json", "-checkpoint", ck)
				require.NoError(t, err, "-transport %s: %s", transport, out)
				f, err := safetensors.ReadFile(ck)
				require.NoError(t, err)
				return jsonLines(t, out), f.DataSHA256()
			}
			in, inSum := train("inproc")
			tcp, tcpSum := train("tcp")
			require.Len(t, tcp, 2, "rank 0's JSON lines only")
			for i := range in {
				for _, k := range []string{"epoch", "test_count", "ranks", "global_batch", "comm_bytes_per_step"} {
					require.Equal(t, in[i][k], tcp[i][k], "epoch %d: %s", i+1, k)
				}
				for _, k := range []string{"train_loss", "test_accuracy", "test_loss"} {
					if ranks == "2" {
						require.Equal(t, in[i][k], tcp[i][k], "epoch %d: %s", i+1, k)
					} else {
						require.InEpsilon(t, in[i][k], tcp[i][k], 1e-5, "epoch %d: %s", i+1, k)
					}
				}
			}
			if ranks == "2" {
				require.Equal(t, inSum, tcpSum, "checkpoint data")
			}
			require.Greater(t, tcp[1]["test_accuracy"], 0.8)
		})
	}
}

// The text report of a tcp run is rank 0's: the plan, the epoch lines and
// the summary once, unprefixed, and nothing from rank 1.
func TestTCPTextReport(t *testing.T) {
	data := writeMNISTDir(t)
	out, err := runTrain(t, "-transport", "tcp", "-data", data, "-ranks", "2", "-batch", "20", "-epochs", "1",
		"-hidden", "8", "-quiet")
	require.NoError(t, err, out)
	var lines []string // but the slowest rank's line, printed when one was significantly slower
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "  slowest rank ") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 3, out)
	require.True(t, strings.HasPrefix(lines[0], "epoch 1/1  train_loss"), out)
	require.True(t, strings.HasPrefix(lines[1], "  per step: compute "), out)
	require.True(t, strings.HasPrefix(lines[2], "done: test accuracy"), out)
	require.NotContains(t, out, "[rank")
}

func TestTCPFlags(t *testing.T) {
	var discard bytes.Buffer
	parse := func(args ...string) (*options, error) { return parseFlags(args, &discard) }

	_, err := parse("-nnodes", "2")
	require.ErrorContains(t, err, "-nnodes applies to -transport tcp only")
	_, err = parse("-transport", "tcp", "-nnodes", "2", "-master", "10.0.0.1:29500")
	require.ErrorContains(t, err, "RINGDDP_SECRET")

	o, err := parse("-transport", "tcp", "-ranks", "3", "-batch", "30")
	require.NoError(t, err)
	require.True(t, o.tr.MP.Launcher)
	require.Equal(t, 3, o.tr.MP.LocalRanks)
	require.Equal(t, 3, o.cfg.Ranks)

	t.Setenv("RINGDDP_SECRET", "s")
	o, err = parse("-transport", "tcp", "-ranks", "2", "-nnodes", "2", "-node-rank", "1", "-master", "10.0.0.1:29500", "-batch", "40")
	require.NoError(t, err)
	require.Equal(t, 4, o.cfg.Ranks, "world size = nnodes × ranks")

	// Under a launcher: one rank; -ranks left out takes the world size,
	// and an explicit -ranks must agree with it.
	t.Setenv("RANK", "1")
	t.Setenv("WORLD_SIZE", "2")
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	o, err = parse("-transport", "tcp", "-batch", "20")
	require.NoError(t, err)
	require.False(t, o.tr.MP.Launcher)
	require.Equal(t, 1, o.tr.MP.Env.Rank)
	require.Equal(t, 2, o.cfg.Ranks)
	require.False(t, o.tr.HoldsRank0(), "rank 1 prints no report")
	_, err = parse("-transport", "tcp", "-ranks", "2", "-batch", "20")
	require.NoError(t, err)
	_, err = parse("-transport", "tcp", "-ranks", "4", "-batch", "20")
	require.ErrorContains(t, err, "-ranks 4 disagrees with the launcher's world size WORLD_SIZE=2")
}
