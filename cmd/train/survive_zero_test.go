package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// ZeRO-1 with buddies (on by default under -on-failure continue): rank 2
// killed after step 7, its optimizer shard rebuilt from its buddy (rank
// 3): the survivors continue from step 7 with nothing lost, and end
// bitwise where DDP's survivors end after the same failure (ZeRO-1 over
// the ring is bitwise DDP over the ring; the rebuilt shards are the state
// DDP's survivors hold) — so the replicas agreed on every element.
//
// Four jobs of 4 processes between them: skipped under -race and -short
// (several seconds on a loaded machine).
func TestSurviveKillZeRO1(t *testing.T) {
	skipSlow(t)
	data := writeMNISTDir(t)
	run := func(extra ...string) (string, continueRecord) {
		ck := filepath.Join(t.TempDir(), "ck.safetensors")
		t.Setenv(faultsVar, "kill:2:7:0")
		out, err := runTrain(t, survivorArgs(data, ck, append([]string{"-algo", "ring"}, extra...)...)...)
		require.NoError(t, err, out)
		epochs, restarts, survived := survivedOutput(t, out)
		require.Empty(t, restarts, out)
		require.Len(t, survived, 1, out)
		require.Len(t, epochs, 2, out)
		requireEachSampleOnce(t, epochs, 24)
		return ck, survived[0]
	}
	zeroCk, c := run("-zero1")
	require.Equal(t, int64(0), c.StepsLost)
	require.Equal(t, int64(7), c.ResumedFromStep)
	require.Equal(t, 3, c.Ranks)
	ddpCk, _ := run()
	require.Zero(t, paramDiff(t, ddpCk, zeroCk), "ZeRO-1's survivors end where DDP's do")
}

// Two ring neighbours lost at once (ranks 1 and 2 killed after step 5):
// rank 1's shard had its only copy on rank 2, so the launcher says why and
// the job restarts from the checkpoint; -zero-buddies=false restarts on
// any failure, as before.
func TestSurviveZeRO1Fallbacks(t *testing.T) {
	skipSlow(t)
	data := writeMNISTDir(t)
	for _, c := range []struct {
		faults, why string
		extra       []string
	}{
		{"kill:1:5:0;kill:2:5:0", "ranks 1 and 2, ring neighbours, were both lost", nil},
		{"kill:2:5:0", "", []string{"-zero-buddies=false"}},
	} {
		ck := filepath.Join(t.TempDir(), "ck.safetensors")
		t.Setenv(faultsVar, c.faults)
		args := survivorArgs(data, ck, append([]string{"-zero1", "-max-restarts", "1", "-checkpoint-every", "4"}, c.extra...)...)
		var out string
		stderr := captureStderr(t, func() {
			var err error
			out, err = runTrain(t, args...)
			require.NoError(t, err, out)
		})
		_, restarts, survived := survivedOutput(t, out)
		require.Empty(t, survived, out)
		require.Len(t, restarts, 1, out)
		require.Contains(t, stderr, c.why)
	}
}

// skipSlow skips a test of several multi-process jobs under -race and
// -short.
func skipSlow(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("several multi-process jobs: skipped under -race and -short")
	}
}
