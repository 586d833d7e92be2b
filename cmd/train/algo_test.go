package main

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/safetensors"
)

// With one algorithm asked for (-algo), training ends bitwise the same on
// in-process ranks, tcp processes and shared-memory processes: the same
// reductions in the same order, whatever carries the bytes. 3 ranks, so
// that the ring's order differs from a plain sum.
func TestSameAlgorithmSameBitsOnEveryTransport(t *testing.T) {
	data := writeMNISTDir(t)
	dir := t.TempDir()
	transports := []string{"inproc", "tcp"}
	if runtime.GOOS == "linux" {
		transports = append(transports, "shm")
	}
	var first map[string]any
	var firstSum string
	for _, tr := range transports {
		ck := filepath.Join(dir, tr+".safetensors")
		out, err := runTrain(t, "-transport", tr, "-algo", "ring", "-data", data, "-ranks", "3", "-batch", "24", "-epochs", "1",
			"-hidden", "16", "-lr", "0.05", "-eval-batch", "25", "-json", "-checkpoint", ck)
		require.NoError(t, err, "-transport %s: %s", tr, out)
		f, err := safetensors.ReadFile(ck)
		require.NoError(t, err)
		lines := jsonLines(t, out)
		last := lines[len(lines)-1]
		if first == nil {
			first, firstSum = last, f.DataSHA256()
			continue
		}
		for _, k := range []string{"train_loss", "test_loss", "test_accuracy"} {
			require.Equal(t, first[k], last[k], "-transport %s: %s", tr, k)
		}
		require.Equal(t, firstSum, f.DataSHA256(), "-transport %s: checkpoint data", tr)
	}
}
