package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Survivors continue over shared memory (-transport shm) and over auto's
// choice on one host (shm as well, through the same choice a job across
// hosts makes): a rank killed with SIGKILL after step 7 while the others
// are in step 8's collectives. Its peers see it gone at once (shm's link
// watcher reads the dead process's socket end), abort, and dial
// generation 1's shared memory under the generation's run id (new socket
// and segment names, so nothing of generation 0 can reach it); nothing is
// lost, every example is used once per epoch, and the result is within
// float rounding of the tcp job's that lost the same rank at the same
// step (the same batches; shm's collectives may sum in another order).
// Each job takes about a second: skipped under -race (three jobs of four
// processes each) and -short.
func TestSurviveKillShmAndAuto(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("three 4-rank jobs: not under -race or -short")
	}
	data := writeMNISTDir(t)
	t.Setenv(faultsVar, "kill:2:7:0")
	run := func(tr string) string {
		ck := filepath.Join(t.TempDir(), "ck.safetensors")
		args := survivorArgs(data, ck)
		args[1] = tr // "-transport", tr
		out, err := runTrain(t, args...)
		require.NoError(t, err, out)
		c := oneSurvived(t, out, 3)
		require.Equal(t, 2, c.FailedRank, out)
		require.Equal(t, "was killed by signal killed", c.Reason)
		require.Equal(t, int64(7), c.ResumedFromStep)
		require.NotNil(t, c.TrainingAgainSeconds)
		require.Less(t, *c.TrainingAgainSeconds, 5.0)
		require.False(t, strings.Contains(out, "falling back"), out)
		return ck
	}
	tcp := run("tcp")
	for _, tr := range []string{"shm", "auto"} {
		ck := run(tr)
		diff := paramDiff(t, tcp, ck)
		t.Logf("-transport %s: largest parameter difference from the tcp job's: %g", tr, diff)
		require.Less(t, diff, 1e-5, "-transport %s", tr)
	}
}
