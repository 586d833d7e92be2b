package main

import (
	"bufio"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The survivors tests run real tcp jobs of the test binary with
// -on-failure continue, whose ranks inject RINGDDP_TEST_FAULTS
// (faults_test.go).

// survivedOutput splits a -json job's stdout into epoch lines, restart
// records and failures survived.
func survivedOutput(t *testing.T, out string) (epochs []map[string]any, restarts []restartRecord, survived []continueRecord) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Bytes()
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m), "line %q", line)
		switch {
		case m["restart"] != nil:
			var r restartRecord
			require.NoError(t, json.Unmarshal(line, &r))
			restarts = append(restarts, r)
		case m["continued"] != nil:
			var c continueRecord
			require.NoError(t, json.Unmarshal(line, &c))
			survived = append(survived, c)
		default:
			epochs = append(epochs, m)
		}
	}
	return epochs, restarts, survived
}

// requireEachSampleOnce checks that every epoch line reports each example
// of its steps' global batches used exactly once.
func requireEachSampleOnce(t *testing.T, epochs []map[string]any, batch float64) {
	t.Helper()
	for _, e := range epochs {
		want := e["step_in_epoch"].(float64) * batch
		require.Equal(t, want, e["samples_used"], "epoch %v: samples used", e["epoch"])
		require.Equal(t, want, e["samples_distinct"], "epoch %v: distinct samples", e["epoch"])
	}
}

// survivorArgs are a 4-rank tcp job's flags with survivors continuing:
// 16 steps an epoch (400 training examples) of a global batch of 24, which 4, 3, 2 and 1 ranks
// divide.
func survivorArgs(data, ck string, extra ...string) []string {
	args := []string{"-transport", "tcp", "-ranks", "4", "-on-failure", "continue", "-data", data, "-batch", "24",
		"-epochs", "2", "-hidden", "16", "-eval-batch", "25", "-json", "-optim", "adam", "-checkpoint", ck}
	return append(args, extra...)
}

// A rank killed with SIGKILL after step 7, while the others are in step
// 8's collectives: the other three drop step 8, continue as generation 1
// from memory and redo it; nothing is lost, every example is used once
// per epoch, the report says so, and the result is within float rounding
// of an uninterrupted 4-rank run's (the same batches, split over 3 ranks
// from step 8 on).
func TestSurviveKill(t *testing.T) {
	data := writeMNISTDir(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck.safetensors")
	t.Setenv(faultsVar, "kill:2:7:0")
	out, err := runTrain(t, survivorArgs(data, ck)...)
	require.NoError(t, err, out)
	epochs, restarts, survived := survivedOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Empty(t, restarts, out)
	require.Len(t, survived, 1, out)
	c := survived[0]
	require.Equal(t, 1, c.Continued)
	require.Equal(t, 1, c.Generation)
	require.Equal(t, 2, c.FailedRank)
	require.Equal(t, "was killed by signal killed", c.Reason)
	require.Contains(t, []int64{6, 7}, c.FailedAtStep) // rank 0 may not have reported step 7 yet
	require.Equal(t, 4, c.PreviousRanks)
	require.Equal(t, 3, c.Ranks)
	require.Equal(t, int64(0), c.StepsLost)
	require.Equal(t, int64(7), c.ResumedFromStep)
	require.Equal(t, 24, c.SamplesRedone)
	require.NotNil(t, c.TrainingAgainSeconds)
	require.Less(t, *c.TrainingAgainSeconds, 5.0)
	require.Equal(t, 3.0, epochs[1]["ranks"])
	require.Equal(t, 32.0, epochs[1]["global_step"])
	requireEachSampleOnce(t, epochs, 24)

	t.Setenv(faultsVar, "")
	ref := filepath.Join(t.TempDir(), "ref.safetensors")
	refOut, err := runTrain(t, "-ranks", "4", "-data", data, "-batch", "24", "-epochs", "2", "-hidden", "16", "-eval-batch", "25",
		"-json", "-optim", "adam", "-checkpoint", ref)
	require.NoError(t, err, refOut)
	diff := paramDiff(t, ref, ck)
	t.Logf("largest parameter difference from the uninterrupted run: %g", diff)
	require.Less(t, diff, 1e-4)
}
