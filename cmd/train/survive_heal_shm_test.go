package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/run/trainer"
)

// Healing over shared memory (-transport shm) and over auto's choice on
// one host (shm as well): rank 2 killed with SIGKILL after step 7; the
// other three go on as generation 1, the launcher starts rank 4, and the
// group grows back to 4 at a step boundary. Every generation — the
// shrunk one and the grown one, the joiner included — dials its own shared
// memory under the generation's run id (new socket names; each rank's
// memfd is created, sized and sealed before its socket name is published,
// and passed only after the handshake, which binds the run id), and each
// member closes the old generation's endpoint (unmapping its files) before
// it dials the new. Nothing is lost, every example is used once per epoch,
// the final parameters are within float rounding of the failure-free
// run's (the same batches; 3 ranks and shm sum in another order; SGD, so
// that rounding stays rounding — Adam's normalisation blows a weight whose
// gradient is rounding noise up to a step's size), at the last step each
// rank maps exactly the 4 files of its generation (none of generation 0's
// or 1's), and /dev/shm holds nothing new after the job (memfds have no
// name there). Each job takes about two seconds: skipped under -race and
// -short.
func TestSurviveHealShmAndAuto(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("two 4-rank jobs of about two seconds each: not under -race or -short")
	}
	data := writeMNISTDir(t)
	ref := filepath.Join(t.TempDir(), "ref.safetensors")
	refOut, err := runTrain(t, "-ranks", "4", "-data", data, "-batch", "24", "-epochs", "3", "-hidden", "16", "-eval-batch", "25",
		"-json", "-optim", "sgd", "-checkpoint", ref)
	require.NoError(t, err, refOut)
	for _, tr := range []string{"shm", "auto"} {
		t.Run(tr, func(t *testing.T) {
			before := devShm(t)
			ck := filepath.Join(t.TempDir(), "ck.safetensors")
			hs, stderr := healJob(t, data, tr, "kill:2:7:0;slow:0:20;shmmaps:48", 3, 1, "-heal", "-optim", "sgd", "-checkpoint", ck)
			require.Len(t, hs, 1)
			require.Equal(t, 4, hs[0].Joined[0].Name)
			diff := paramDiff(t, ref, ck)
			t.Logf("-transport %s: healed at step %d; largest parameter difference from the failure-free run: %g", tr, hs[0].AtStep, diff)
			require.Less(t, diff, 1e-5)
			require.Equal(t, []int{4, 4, 4, 4}, shmMappings(t, stderr), "each rank's memfd mappings at the last step\n%s", stderr)
			require.Equal(t, before, devShm(t), "/dev/shm after the job")
		})
	}
}

// shmMapsFault, for a fault "shmmaps:STEP" (faults_test.go), makes every
// rank say on stderr how many shm files it maps after global step STEP:
// "shm files mapped: N". It keeps the rank's other step hook.
func shmMapsFault(p []string, rank int, cfg *trainer.Config) bool {
	if len(p) != 2 || p[0] != "shmmaps" {
		return false
	}
	step, _ := strconv.ParseInt(p[1], 10, 64)
	prev := cfg.OnRankStep
	cfg.OnRankStep = func(r int, s trainer.StepInfo) {
		if prev != nil {
			prev(r, s)
		}
		if s.GlobalStep == step {
			b, _ := os.ReadFile("/proc/self/maps")
			fmt.Fprintf(os.Stderr, "rank %d: shm files mapped: %d\n", rank, strings.Count(string(b), "memfd:ringddp-shm"))
		}
	}
	return true
}

// shmMappings are the counts shmMapsFault's lines in stderr give, sorted.
func shmMappings(t *testing.T, stderr string) []int {
	t.Helper()
	var n []int
	for _, m := range regexp.MustCompile(`shm files mapped: (\d+)`).FindAllStringSubmatch(stderr, -1) {
		v, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		n = append(n, v)
	}
	slices.Sort(n)
	return n
}

// devShm lists /dev/shm.
func devShm(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// With -spares 1 over shm, two ranks lost one after the other: the spare
// started with the job (rank 4) heals the first loss, the launcher starts
// a new spare (rank 5) once the grown generation trains, and that one
// heals the second loss — no replacement is started for either (a spare
// waits each time). Nothing is lost and every example is used once per
// epoch. A job of about three seconds: skipped under -race and -short.
func TestHealSparesReplenished(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a 4-rank job of about three seconds: not under -race or -short")
	}
	// 64 steps, rank 0 30 ms slower each: time for the new spare to start
	// between the two kills.
	hs, stderr := healJob(t, writeMNISTDir(t), "shm", "kill:2:7:0;kill:1:40:0;slow:0:30", 4, 2, "-spares", "1")
	t.Log(grepLines(stderr, "launch: "))
	require.Len(t, hs, 2)
	require.Equal(t, 4, hs[0].Joined[0].Name)
	require.Equal(t, "spare started with the job", hs[0].Joined[0].Why)
	require.Equal(t, 5, hs[1].Joined[0].Name)
	require.Contains(t, hs[1].Joined[0].Why, "spare, replenished after rank 4 was taken in at generation 2")
	require.NotContains(t, stderr, "to join the job (replaces", "no replacement: a spare was ready each time")
	require.Contains(t, stderr, "started rank 5 (pid")
}

// healJob runs survivorArgs's 4-rank job on data over transport tr for epochs
// epochs with faults and the extra flags, and checks that it ends well:
// no restart, losses failures survived with no step lost, every example
// once per epoch, 4 ranks at the end. It returns the heals and the
// launcher's stderr (the ranks' lines included).
func healJob(t *testing.T, data, tr, faults string, epochs, losses int, extra ...string) ([]healRecord, string) {
	t.Helper()
	t.Setenv(faultsVar, faults)
	args := append(survivorArgs(data, filepath.Join(t.TempDir(), "ck.safetensors"), "-epochs", strconv.Itoa(epochs)), extra...)
	args[1] = tr // "-transport", tr
	var out string
	var err error
	stderr := captureStderr(t, func() { out, err = runTrain(t, args...) })
	require.NoError(t, err, "%s\n%s", out, stderr)
	ep, restarts, survived := survivedOutput(t, out)
	require.Len(t, ep, epochs, out)
	require.Empty(t, restarts, out)
	require.Len(t, survived, losses, out)
	for _, c := range survived {
		require.Equal(t, int64(0), c.StepsLost)
	}
	requireEachSampleOnce(t, ep, 24)
	require.Equal(t, 4.0, ep[epochs-1]["ranks"], out)
	return healedOutput(t, out), stderr
}
