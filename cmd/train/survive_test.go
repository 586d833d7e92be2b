package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/run/launch"
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
		case m["healed"] != nil:
			continue // survive_heal_test.go reads them
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

// Rank 0, whose stdout is the job's report, is killed: rank 1 becomes
// rank 0 of generation 1, and its lines are the report from then on
// (unprefixed), the epochs' and the summary alike.
func TestSurviveKillRank0(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, "kill:0:5:0")
	out, err := runTrain(t, survivorArgs(data, ck)...)
	require.NoError(t, err, out)
	epochs, _, survived := survivedOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Len(t, survived, 1, out)
	require.Equal(t, 0, survived[0].FailedRank)
	require.Equal(t, int64(0), survived[0].StepsLost)
	requireEachSampleOnce(t, epochs, 24)
}

// Two failures in a row: rank 3 killed after step 4, then rank 1 after
// step 6 of generation 1: the job finishes on 2 ranks as generation 2.
func TestSurviveTwoFailures(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, "kill:3:4:0;kill:1:6:0")
	out, err := runTrain(t, survivorArgs(data, ck)...)
	require.NoError(t, err, out)
	epochs, restarts, survived := survivedOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Empty(t, restarts, out)
	require.Len(t, survived, 2, out)
	require.Equal(t, []int{3, 1}, []int{survived[0].FailedRank, survived[1].FailedRank})
	require.Equal(t, []int{1, 2}, []int{survived[0].Generation, survived[1].Generation})
	require.Equal(t, 2, survived[1].Ranks)
	for _, c := range survived {
		require.Equal(t, int64(0), c.StepsLost)
	}
	require.Equal(t, 2.0, epochs[1]["ranks"])
	requireEachSampleOnce(t, epochs, 24)
}

// A failure that leaves fewer ranks than -min-ranks: the job falls back to
// the checkpoint restart (-max-restarts), on the 4 ranks it started with.
func TestSurviveBelowMinRanksRestarts(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, "kill:2:9:0")
	out, err := runTrain(t, survivorArgs(data, ck, "-min-ranks", "4", "-max-restarts", "1", "-checkpoint-every", "4")...)
	require.NoError(t, err, out)
	epochs, restarts, survived := survivedOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Empty(t, survived, out)
	require.Len(t, restarts, 1, out)
	r := restarts[0]
	require.Equal(t, 2, r.FailedRank)
	require.Equal(t, "was killed by signal killed", r.Reason)
	require.Equal(t, int64(8), r.ResumedFromStep)
	require.Equal(t, 4, r.Ranks)
}

// The default global batch of 256 on 4 ranks, one lost: 3 ranks do not
// divide it, so the survivors split it unevenly (86, 85, 85) and continue
// with nothing lost and every example used once per epoch. A 4-process
// job of seconds: skipped under -race.
func TestSurviveUnevenResplit(t *testing.T) {
	if raceEnabled {
		t.Skip("a 4-process job of seconds: skipped under -race")
	}
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, "kill:1:1:0")
	args := survivorArgs(data, ck)
	args[slicesIndex(args, "-batch")+1] = "256"
	out, err := runTrain(t, args...)
	require.NoError(t, err, out)
	epochs, restarts, survived := survivedOutput(t, out)
	require.Empty(t, restarts, out)
	require.Len(t, survived, 1, out)
	require.Equal(t, 3, survived[0].Ranks)
	require.Equal(t, int64(0), survived[0].StepsLost)
	require.Len(t, epochs, 2, out)
	require.Equal(t, 3.0, epochs[1]["ranks"])
	requireEachSampleOnce(t, epochs, 256)
}

func slicesIndex(xs []string, x string) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

// captureStderr runs f with os.Stderr (where the launcher forwards the
// ranks' stderr) going to a file, and returns what was written there.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stderr")
	file, err := os.Create(path)
	require.NoError(t, err)
	saved := os.Stderr
	os.Stderr = file
	defer func() { os.Stderr = saved }()
	f()
	require.NoError(t, file.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// A rank stopped with SIGSTOP after step 5 (a hang): the others' transport
// gives up on it after -timeout 1s, it does not check in, and it is
// removed: training goes on within -timeout + 1 s of the stop. It is
// never continued; the launcher stops it once the job is done.
func TestSurviveStoppedRank(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	stamp := filepath.Join(t.TempDir(), "stopped")
	t.Setenv(faultsVar, "stop:1:5:0")
	t.Setenv(stoppedAtVar, stamp)
	out, err := runTrain(t, survivorArgs(data, ck, "-timeout", "1s")...)
	require.NoError(t, err, out)
	epochs, _, survived := survivedOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Len(t, survived, 1, out)
	c := survived[0]
	require.Equal(t, 1, c.FailedRank)
	require.Contains(t, c.Reason, "did not check in")
	require.Equal(t, int64(0), c.StepsLost)
	require.NotNil(t, c.TrainingAgainUnix)
	b, err := os.ReadFile(stamp)
	require.NoError(t, err)
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	removedAt := *c.TrainingAgainUnix - *c.TrainingAgainSeconds + c.RemovedSeconds
	removed := time.Duration(removedAt*1e9 - float64(ns))
	again := time.Duration(*c.TrainingAgainUnix*1e9 - float64(ns))
	t.Logf("removed %v, training again %v after the stop (-timeout 1s)", removed, again)
	require.Less(t, removed, 2*time.Second, "removed within -timeout + 1 s")
	requireEachSampleOnce(t, epochs, 24)
}

// A stopped rank continued after its removal tries to go on: it is
// refused (not a member of generation 1) and exits saying so, and the job
// finishes without it.
func TestSurviveRevokedRankRefused(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, "stop:2:5:2500;slow:0:40")
	var out string
	var err error
	stderr := captureStderr(t, func() {
		out, err = runTrain(t, survivorArgs(data, ck, "-timeout", "1s", "-epochs", "4")...)
	})
	require.NoError(t, err, out+stderr)
	epochs, _, survived := survivedOutput(t, out)
	require.Len(t, epochs, 4, out)
	require.Len(t, survived, 1, out)
	require.Equal(t, 2, survived[0].FailedRank)
	require.Contains(t, stderr, "[rank 2] train: ")
	require.Contains(t, stderr, "rank 2 was removed from the job at generation 1")
	require.Contains(t, stderr, "cannot come back without healing")
	requireEachSampleOnce(t, epochs, 24)
}

// The text report of a failure survived names the rank, the step, the
// new world and the pause; -json gives the same as a record.
func TestPrintContinued(t *testing.T) {
	at := time.Unix(1700000000, 0)
	c := launch.Continued{Number: 1, Generation: 1, Lost: []launch.LostRank{{Rank: 2, Pid: 4242, Reason: "was killed by signal killed"}},
		Step: 357, PreviousRanks: 4, Ranks: 3, FailedAt: at, Removed: 9 * time.Millisecond,
		TrainingAgain: 90 * time.Millisecond, TrainingAgainAt: at.Add(90 * time.Millisecond), Paused: 110 * time.Millisecond, Resumed: 357, Reshard: -1}
	var b strings.Builder
	printContinued(&b, c, 240, false)
	require.Equal(t, "failure 1: rank 2 (pid 4242) was killed by signal killed at step 357 (4 ranks); continuing on 3 ranks as generation 1 "+
		"from step 357, 0 steps lost, 240 samples redone, training again 0.09s after the failure (paused 0.11s)\n", b.String())
	b.Reset()
	printContinued(&b, c, 240, true)
	require.NotContains(t, b.String(), "reshard_bytes", "DDP: no re-shard")
	b.Reset()
	c.Reshard = 98304 // ZeRO-1
	printContinued(&b, c, 240, false)
	require.True(t, strings.HasSuffix(b.String(), "(paused 0.11s); optimizer state re-sharded: 98304 bytes\n"), b.String())
	b.Reset()
	printContinued(&b, c, 240, true)
	var zrec continueRecord
	require.NoError(t, json.Unmarshal([]byte(b.String()), &zrec))
	require.NotNil(t, zrec.ReshardBytes)
	require.Equal(t, int64(98304), *zrec.ReshardBytes)
	require.Nil(t, zrec.ReshardSentBytes, "no parts reported")
	b.Reset()
	c.ReshardSent = []int64{65536, 0, 32768} // each rank's part
	printContinued(&b, c, 240, false)
	require.True(t, strings.HasSuffix(b.String(), "(paused 0.11s); optimizer state re-sharded: 98304 bytes (rank 0 65536, rank 2 32768)\n"), b.String())
	b.Reset()
	printContinued(&b, c, 240, true)
	zrec = continueRecord{}
	require.NoError(t, json.Unmarshal([]byte(b.String()), &zrec))
	require.Equal(t, int64(98304), *zrec.ReshardBytes)
	require.Equal(t, []int64{65536, 0, 32768}, zrec.ReshardSentBytes)
	b.Reset()
	c.Lost[0].Reason = "it did not check in within 500ms of the failure (stopped, hung or cut off)"
	c.TrainingAgainAt = time.Time{}
	printContinued(&b, c, 240, false)
	require.Contains(t, b.String(), "rank 2 (pid 4242) was removed: it did not check in")
	require.Contains(t, b.String(), "but the job ended before training again")
	b.Reset()
	printContinued(&b, c, 240, true)
	var rec continueRecord
	require.NoError(t, json.Unmarshal([]byte(b.String()), &rec))
	require.Equal(t, 1, rec.Continued)
	require.Equal(t, int64(0), rec.StepsLost)
	require.Nil(t, rec.TrainingAgainSeconds)
}
