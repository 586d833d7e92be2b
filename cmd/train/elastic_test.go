package main

import (
	"errors"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/safetensors"
)

// The elastic tests run real tcp jobs of the test binary (selftest) whose
// ranks inject the faults of RINGDDP_TEST_FAULTS (faults_test.go) and
// compare the result with an uninterrupted in-process run resumed from the
// checkpoint the restart took: with 2 ranks tcp and in-process runs are
// bitwise the same (TestTCPMatchesInproc).

// jobOutput splits a -json job's stdout into epoch lines and restart
// records.
func jobOutput(t *testing.T, out string) (epochs []map[string]any, restarts []restartRecord) {
	t.Helper()
	epochs, restarts, survived := survivedOutput(t, out)
	require.Empty(t, survived, "failures survived in a job without -on-failure continue")
	return epochs, restarts
}

// dataSHA is the SHA-256 of a checkpoint's tensors: parameters and
// optimizer state.
func dataSHA(t *testing.T, path string) string {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	require.NoError(t, err)
	return f.DataSHA256()
}

// paramDiff is the largest absolute difference between two checkpoints'
// parameters.
func paramDiff(t *testing.T, a, b string) float64 {
	t.Helper()
	fa, err := safetensors.ReadFile(a)
	require.NoError(t, err)
	fb, err := safetensors.ReadFile(b)
	require.NoError(t, err)
	worst := 0.0
	for _, ta := range fa.Tensors {
		if !strings.HasPrefix(ta.Name, "param/") {
			continue
		}
		tb, ok := fb.Tensor(ta.Name)
		require.True(t, ok, ta.Name)
		xa, err := safetensors.Float64s(ta)
		require.NoError(t, err)
		xb, err := safetensors.Float64s(tb)
		require.NoError(t, err)
		for i := range xa {
			worst = max(worst, math.Abs(xa[i]-xb[i]))
		}
	}
	return worst
}

// A rank killed (SIGKILL) mid-epoch: the launcher restarts the job on the
// same 2 ranks from the last periodic checkpoint, the job finishes, the
// restart is reported, and the final parameters and optimizer state are
// bitwise those of an uninterrupted run resumed from that checkpoint.
func TestElasticKillRestartsSameSize(t *testing.T) {
	data := writeMNISTDir(t)
	for _, mode := range []struct {
		name  string
		flags []string
	}{
		{"ddp", []string{"-optim", "sgd"}},
		{"zero1", []string{"-optim", "adam", "-zero1"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			dir := t.TempDir()
			ck := filepath.Join(dir, "ck.safetensors")
			common := append([]string{"-data", data, "-batch", "20", "-epochs", "2", "-hidden", "16", "-eval-batch", "25", "-json"}, mode.flags...)
			t.Setenv(faultsVar, "kill:1:13:0") // epoch 1 has 20 steps
			out, err := runTrain(t, append([]string{"-transport", "tcp", "-ranks", "2", "-checkpoint", ck,
				"-checkpoint-every", "5", "-checkpoint-keep", "100", "-max-restarts", "2"}, common...)...)
			require.NoError(t, err, out)
			epochs, restarts := jobOutput(t, out)
			require.Len(t, epochs, 2, out)
			require.Len(t, restarts, 1, out)
			r := restarts[0]
			require.Equal(t, 1, r.Restart)
			require.Equal(t, 1, r.FailedRank)
			require.Equal(t, "was killed by signal killed", r.Reason)
			// Rank 1 dies once its step 13 is done; rank 0 may not have
			// finished it by then.
			require.Contains(t, []int64{12, 13}, r.FailedAtStep)
			require.False(t, r.AtStartup)
			require.Equal(t, 2, r.PreviousRanks)
			require.Equal(t, 2, r.Ranks)
			require.Equal(t, int64(10), r.ResumedFromStep)
			require.Equal(t, r.FailedAtStep-10, r.StepsLost)
			from := filepath.Join(dir, "ck.step10.safetensors")
			require.Equal(t, from, r.Checkpoint)
			require.NotNil(t, r.TrainingAgainSeconds)
			require.Equal(t, 40.0, epochs[1]["global_step"])

			t.Setenv(faultsVar, "")
			ref := filepath.Join(t.TempDir(), "ref.safetensors")
			_, err = runTrain(t, append([]string{"-ranks", "2", "-resume", from, "-checkpoint", ref}, common...)...)
			require.NoError(t, err)
			require.Equal(t, dataSHA(t, ref), dataSHA(t, ck), "final parameters and optimizer state")
		})
	}
}

// ZeRO-1 on 3 ranks: rank 1 is killed, restarted on 3 ranks, and then
// fails at start-up, so it cannot be restarted: the second restart runs on
// 2 ranks (-min-ranks 2), keeping the global batch of 24. The result is
// bitwise a 2-rank run's resumed from the same checkpoint, and within
// float rounding of a 3-rank run's: the batches are the same, split
// differently.
func TestElasticShrinks(t *testing.T) {
	data := writeMNISTDir(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck.safetensors")
	common := []string{"-data", data, "-batch", "24", "-epochs", "2", "-hidden", "16", "-eval-batch", "25", "-json", "-optim", "adam", "-zero1"}
	t.Setenv(faultsVar, "kill:1:9:0;startup:1:1")
	out, err := runTrain(t, append([]string{"-transport", "tcp", "-ranks", "3", "-checkpoint", ck,
		"-checkpoint-every", "4", "-checkpoint-keep", "100", "-max-restarts", "2", "-min-ranks", "2"}, common...)...)
	require.NoError(t, err, out)
	epochs, restarts := jobOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Len(t, restarts, 2, out)
	from := filepath.Join(dir, "ck.step8.safetensors")

	first, second := restarts[0], restarts[1]
	require.Contains(t, []int64{8, 9}, first.FailedAtStep)
	require.Equal(t, first.FailedAtStep-8, first.StepsLost)
	require.Equal(t, 3, first.Ranks, "a rank that failed in training is restarted")
	require.Nil(t, first.TrainingAgainSeconds, "the first restart failed at start-up")

	require.Equal(t, 1, second.FailedRank)
	require.Equal(t, "exited with status 3", second.Reason)
	require.True(t, second.AtStartup)
	require.Equal(t, 3, second.PreviousRanks)
	require.Equal(t, 2, second.Ranks, "a rank that fails at start-up is dropped")
	require.Equal(t, int64(8), second.ResumedFromStep)
	require.Equal(t, from, second.Checkpoint)
	require.Equal(t, int64(0), second.StepsLost)
	require.NotNil(t, second.TrainingAgainSeconds)
	require.Equal(t, 2.0, epochs[1]["ranks"])
	require.Equal(t, 24.0, epochs[1]["global_batch"])

	t.Setenv(faultsVar, "")
	same := filepath.Join(t.TempDir(), "same.safetensors")
	_, err = runTrain(t, append([]string{"-ranks", "2", "-resume", from, "-checkpoint", same}, common...)...)
	require.NoError(t, err)
	require.Equal(t, dataSHA(t, same), dataSHA(t, ck), "bitwise the 2-rank run's")
	wide := filepath.Join(t.TempDir(), "wide.safetensors")
	_, err = runTrain(t, append([]string{"-ranks", "3", "-resume", from, "-checkpoint", wide}, common...)...)
	require.NoError(t, err)
	diff := paramDiff(t, wide, ck)
	t.Logf("largest parameter difference from the 3-rank run: %g", diff)
	require.Less(t, diff, 1e-5)
}

// Rank 0 crashes while writing the checkpoint at step 15, leaving it torn
// (cut to half, under both its names): the restart skips it, says so, and
// resumes from step 10's.
func TestElasticTornCheckpoint(t *testing.T) {
	data := writeMNISTDir(t)
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck.safetensors")
	common := []string{"-data", data, "-batch", "20", "-epochs", "1", "-hidden", "16", "-eval-batch", "25", "-json"}
	t.Setenv(faultsVar, "tear:15:0")
	out, err := runTrain(t, append([]string{"-transport", "tcp", "-ranks", "2", "-checkpoint", ck,
		"-checkpoint-every", "5", "-max-restarts", "1"}, common...)...)
	require.NoError(t, err, out)
	epochs, restarts := jobOutput(t, out)
	require.Len(t, epochs, 1, out)
	require.Len(t, restarts, 1, out)
	r := restarts[0]
	require.Equal(t, 0, r.FailedRank)
	require.Equal(t, "was killed by signal killed", r.Reason)
	require.Equal(t, int64(10), r.ResumedFromStep)
	require.Equal(t, filepath.Join(dir, "ck.step10.safetensors"), r.Checkpoint)
	require.NotEmpty(t, r.Skipped)
	require.Contains(t, strings.Join(r.Skipped, "\n"), "ck.step15.safetensors")
	require.Contains(t, strings.Join(r.Skipped, "\n"), "corrupt")
}

// A rank that fails at start-up in every attempt: no shrinking allowed, so
// the job ends once its 2 restarts are spent (after backoffs of 0.5 and
// 1 s), non-zero, naming all three failures.
func TestElasticRestartsExhausted(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, "startup:1:*")
	start := time.Now()
	out, err := runTrain(t, "-transport", "tcp", "-ranks", "2", "-data", data, "-batch", "20", "-hidden", "8", "-json",
		"-checkpoint", ck, "-max-restarts", "2")
	require.Error(t, err, out)
	require.Less(t, time.Since(start), 30*time.Second)
	var ex *launch.RestartsExhaustedError
	require.True(t, errors.As(err, &ex), "%v", err)
	require.Len(t, ex.Failures, 3)
	for i := 1; i <= 3; i++ {
		require.Regexp(t, regexp.MustCompile(`attempt `+string(rune('0'+i))+` \(2 ranks\): rank 1 \(pid \d+\) exited with status 3 at start-up`), err.Error())
	}
	require.Contains(t, err.Error(), "no restart is left (max restarts 2)")
	_, restarts := jobOutput(t, out)
	require.Len(t, restarts, 2)
	for _, r := range restarts {
		require.Nil(t, r.TrainingAgainSeconds)
		require.Empty(t, r.Checkpoint, "no checkpoint was written: started from the beginning")
	}
}

func TestElasticFlags(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-max-restarts", "1", "-checkpoint", ck}, "-max-restarts applies to -transport tcp only"},
		{[]string{"-transport", "tcp", "-max-restarts", "1"}, "-max-restarts needs -checkpoint"},
		{[]string{"-transport", "tcp", "-max-restarts", "-1"}, "-max-restarts -1: must not be negative"},
		{[]string{"-transport", "tcp", "-min-ranks", "2"}, "-min-ranks applies with -max-restarts or -on-failure continue only"},
		{[]string{"-transport", "tcp", "-max-restarts", "1", "-checkpoint", ck, "-min-ranks", "5"}, "-min-ranks 5: want 1..4"},
		{[]string{"-transport", "tcp", "-ranks", "4", "-batch", "20", "-max-restarts", "1", "-checkpoint", ck, "-min-ranks", "3"},
			"-min-ranks 3: the global batch 20 cannot be kept on 3..3 ranks"},
		{[]string{"-transport", "tcp", "-on-failure", "maybe"}, `-on-failure "maybe": want restart or continue`},
		{[]string{"-on-failure", "continue"}, "-on-failure continue applies to -transport tcp, shm or auto only"},
		{[]string{"-transport", "tcp", "-on-failure", "continue", "-min-ranks", "5"}, "-min-ranks 5: want 1..4"},
		{[]string{"-checkpoint-every", "5"}, "-checkpoint-every and -checkpoint-keep need -checkpoint"},
		{[]string{"-checkpoint-every", "-5", "-checkpoint", ck}, "-checkpoint-every -5"},
		{[]string{"-resume", "latest"}, "-resume latest needs -checkpoint"},
		{[]string{"-transport", "tcp", "-max-restarts", "1", "-checkpoint", ck, "-rejoin-timeout", "5s"}, "-rejoin-timeout applies with -max-restarts and -nnodes > 1 only"},
		{[]string{"-transport", "tcp", "-ranks", "2", "-nnodes", "2", "-master", "127.0.0.1:1", "-insecure", "-max-restarts", "1", "-checkpoint", ck, "-rejoin-timeout", "0s"},
			"-rejoin-timeout 0s: must be positive"},
		{[]string{"-transport", "tcp", "-ranks", "2", "-nnodes", "3", "-master", "127.0.0.1:1", "-insecure", "-batch", "18", "-max-restarts", "1", "-checkpoint", ck, "-min-ranks", "3"},
			"-min-ranks 3: the global batch 18 cannot be kept on 3..4 ranks in whole nodes of 2"},
		{[]string{"-transport", "tcp", "-ranks", "2", "-nnodes", "2", "-master", "127.0.0.1:1", "-insecure", "-max-restarts", "1", "-checkpoint", ck, "-min-ranks", "5"},
			"-min-ranks 5: want 1..4 (-nnodes × -ranks)"},
	}
	for _, c := range cases {
		_, err := runTrain(t, append([]string{"-data", data}, c.args...)...)
		require.ErrorContains(t, err, c.want, "args %q", c.args)
	}
	// Under another launcher's environment -max-restarts is an error: that
	// launcher restarts the job.
	t.Setenv("RANK", "0")
	t.Setenv("WORLD_SIZE", "2")
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	_, err := runTrain(t, "-data", data, "-transport", "tcp", "-batch", "20", "-max-restarts", "1", "-checkpoint", ck)
	require.ErrorContains(t, err, "-max-restarts is for this command's own launcher")
}

// -resume latest starts afresh when there is no checkpoint yet and takes
// the newest one of the series otherwise.
func TestResumeLatest(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	common := []string{"-data", data, "-ranks", "2", "-batch", "20", "-epochs", "1", "-hidden", "8", "-checkpoint", ck, "-checkpoint-every", "5"}
	out, err := runTrain(t, append(common, "-resume", "latest", "-max-steps", "12")...)
	require.NoError(t, err)
	require.NotContains(t, out, "resuming from")
	require.FileExists(t, filepath.Join(filepath.Dir(ck), "ck.step10.safetensors"))
	require.FileExists(t, filepath.Join(filepath.Dir(ck), "ck.step12.safetensors"))
	require.NoFileExists(t, filepath.Join(filepath.Dir(ck), "ck.step5.safetensors"), "2 kept")

	out, err = runTrain(t, append(common, "-resume", "latest")...)
	require.NoError(t, err)
	require.Contains(t, out, "resuming from "+filepath.Join(filepath.Dir(ck), "ck.step12.safetensors")+" at epoch 1, step 12")
}
