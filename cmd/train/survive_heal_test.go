package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/run/trainer"
)

// healedOutput are a -json job's heal records.
func healedOutput(t *testing.T, out string) []healRecord {
	t.Helper()
	var hs []healRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		if m["healed"] != nil {
			var h healRecord
			require.NoError(t, json.Unmarshal(sc.Bytes(), &h))
			hs = append(hs, h)
		}
	}
	return hs
}

// requireHealedOnce checks the -json output out of a job in which one
// failure was survived and healed: n epoch lines, no restart, one
// survival that lost no step, every example once per epoch (24 a step:
// survivorArgs's batch) and one heal, which it returns with the epochs.
func requireHealedOnce(t *testing.T, out string, n int, msgs ...any) ([]map[string]any, healRecord) {
	t.Helper()
	msg := append([]any{"%s"}, out)
	if len(msgs) > 0 {
		msg = msgs
	}
	epochs, restarts, survived := survivedOutput(t, out)
	require.Len(t, epochs, n, msg...)
	require.Empty(t, restarts, msg...)
	require.Len(t, survived, 1, msg...)
	require.Equal(t, int64(0), survived[0].StepsLost)
	requireEachSampleOnce(t, epochs, 24)
	hs := healedOutput(t, out)
	require.Len(t, hs, 1, msg...)
	return epochs, hs[0]
}

// A rank killed with SIGKILL after step 7, with -heal: the other three go
// on as generation 1, the launcher starts rank 4 to replace it, and once it
// is ready the group grows back to 4 at a step boundary; rank 4 is healed
// from the three (each sends about a third of the state), the replicas are
// checked bitwise, and the job ends on 4 ranks with every example used once
// per epoch and no step lost. (A real tcp job: skipped under -short.)
func TestSurviveHeal(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a tcp job of several seconds")
	}
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, "kill:2:7:0;slow:0:20") // 48 steps of 20 ms or more: time for the replacement to start
	out, err := runTrain(t, survivorArgs(data, ck, "-heal", "-epochs", "3")...)
	require.NoError(t, err, out)
	epochs, h := requireHealedOnce(t, out, 3)
	require.Equal(t, 2, h.Healed)
	require.Len(t, h.Joined, 1)
	require.Equal(t, 3, h.Joined[0].Rank)
	require.Equal(t, 4, h.Joined[0].Name)
	require.Contains(t, h.Joined[0].Why, "replaces rank 2")
	require.Len(t, h.SentBytes, 4)
	require.Zero(t, h.SentBytes[3])
	for r := range 3 {
		require.Greater(t, h.SentBytes[r], h.StateBytes/4, "rank %d sends about a third", r)
		require.Less(t, h.SentBytes[r], h.StateBytes/2, "rank %d sends about a third", r)
	}
	require.Equal(t, 4.0, epochs[2]["ranks"], out)
	require.Equal(t, 48.0, epochs[2]["global_step"])
}

// Healing's faults (RINGDDP_TEST_FAULTS, faults_test.go), RANK being a
// member's rank at the start or a joining rank's name:
//
//	secret:RANK          the rank starts with a wrong secret (the store refuses it)
//	jobid:RANK           the rank claims another job's id (heal's identity check refuses it)
//	joinkill:RANK:US     a joining rank kills itself US µs after it connected (during its heal)
//	nodekill:RANK:US     a joining rank kills its launcher — its node's ranks die with it —
//	                     US µs after it connected (a node lost during its heal)
//	healerkill:RANK:US   member RANK kills itself US µs after it rejoined a generation with
//	                     joiners (during the heal)

// wrongSecret, for a secret fault of rank, changes this process's secret.
func wrongSecret(spec string, rank int) {
	for _, f := range strings.Split(spec, ";") {
		if f == "secret:"+strconv.Itoa(rank) {
			s := []byte(os.Getenv(launch.EnvSecret))
			for i := range s {
				s[i] = 'a' + (s[i]+1)%26
			}
			_ = os.Setenv(launch.EnvSecret, string(s))
		}
	}
}

// healFault sets up the healing fault p for rank; false when p is none.
func healFault(p []string, rank int, cfg *trainer.Config) bool {
	if len(p) < 2 || p[1] != strconv.Itoa(rank) {
		return false
	}
	kill := func(us string) func() {
		d, _ := strconv.Atoi(us)
		return func() {
			time.AfterFunc(time.Duration(d)*time.Microsecond, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
		}
	}
	switch {
	case p[0] == "jobid" && len(p) == 2:
		cfg.JobID = "another-job"
	case p[0] == "joinkill" && len(p) == 3:
		connect, k := cfg.Connect, kill(p[2])
		cfg.Connect = func(ctx context.Context, ranks int) ([]transport.Conn, error) {
			c, err := connect(ctx, ranks)
			k()
			return c, err
		}
	case p[0] == "nodekill" && len(p) == 3:
		d, _ := strconv.Atoi(p[2])
		connect := cfg.Connect
		cfg.Connect = func(ctx context.Context, ranks int) ([]transport.Conn, error) {
			c, err := connect(ctx, ranks)
			launcher := os.Getppid()
			time.AfterFunc(time.Duration(d)*time.Microsecond, func() { _ = syscall.Kill(launcher, syscall.SIGKILL) })
			return c, err
		}
	case p[0] == "healerkill" && len(p) == 3:
		if s, ok := cfg.Survive.(*launch.Survivor); ok {
			cfg.Survive = killOnGrow{Survivor: s, kill: kill(p[2])}
		}
	default:
		return false
	}
	return true
}

// killOnGrow is a Survivor that kills its process soon after it rejoined
// a generation with joiners.
type killOnGrow struct {
	*launch.Survivor
	kill func()
}

func (k killOnGrow) Rejoin(ctx context.Context, cause error) (transport.Conn, rendezvous.Generation, error) {
	c, g, err := k.Survivor.Rejoin(ctx, cause)
	if err == nil && len(k.JoinedRanks()) > 0 {
		k.kill()
	}
	return c, g, err
}

// runHealJob runs survivorArgs's 4-rank tcp job on fresh data with
// $RINGDDP_FAULTS set to faults and the flags args, skipped under -short
// and -race (a tcp job of several seconds); it requires the job to
// succeed and returns its stdout and stderr.
func runHealJob(t *testing.T, faults string, args ...string) (out, stderr string) {
	t.Helper()
	if testing.Short() || raceEnabled {
		t.Skip("a tcp job of several seconds")
	}
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, faults)
	var err error
	stderr = captureStderr(t, func() { out, err = runTrain(t, survivorArgs(data, ck, args...)...) })
	require.NoError(t, err, "%s\n%s", out, stderr)
	return out, stderr
}

// healBadCase runs a 4-rank job that loses rank 2 after step 7 with
// -heal, fault extra and flags args, and checks that it finishes with
// every example used once per epoch, no step lost, and the last heal's
// joiner named want; it returns the launcher's stderr.
func healBadCase(t *testing.T, extra string, want int, args ...string) string {
	t.Helper()
	// 4 epochs of 16 steps, rank 0 20 ms slower each: time for two joiners
	// to start.
	out, stderr := runHealJob(t, "kill:2:7:0;slow:0:20;"+extra, append([]string{"-heal", "-epochs", "4"}, args...)...)
	epochs := requireNoStepLost(t, out, 4)
	hs := healedOutput(t, out)
	require.NotEmpty(t, hs, "%s\n%s", out, stderr)
	t.Log(grepLines(stderr, "launch: "))
	last := hs[len(hs)-1]
	require.GreaterOrEqual(t, last.Joined[0].Name, want, out)
	require.Equal(t, 4.0, epochs[3]["ranks"], out)
	return stderr
}

// A replacement started with a wrong secret: the store refuses it at the
// handshake, it exits before it is taken in, and the launcher starts
// another (rank 5), which heals.
func TestHealWrongSecret(t *testing.T) {
	stderr := healBadCase(t, "secret:4", 5)
	require.Contains(t, stderr, "rank 4 (pid")
	require.Contains(t, stderr, "started to join")
	t.Log(grepLines(stderr, "[rank 4]"))
}

// A replacement that claims another job's id: heal's identity check
// refuses it on every rank before any state moves, the members go on
// without it, and the next replacement (rank 5) heals.
func TestHealAnotherJob(t *testing.T) {
	stderr := healBadCase(t, "jobid:4", 5)
	require.Contains(t, stderr, "another-job")
	t.Log(grepLines(stderr, "another-job"))
}

// The joiner dies during its heal: the members abort, go on without it,
// and the next replacement (rank 5) heals.
func TestHealJoinerDies(t *testing.T) {
	healBadCase(t, "joinkill:4:2000", 5)
}

// A healer dies during the heal (a second failure in a row): the heal ends
// on every rank, the members left go round to the next generation without
// it (and without the joiner, whose heal failed), and replacements heal the
// group back to 4.
func TestHealHealerDies(t *testing.T) {
	stderr := healBadCase(t, "healerkill:1:1000", 5) // 5 and 6 replace 1 and 4, in either order
	require.Contains(t, stderr, "rank 1 (pid")
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// With -spares 1 a fifth process starts with the job and waits ready; when
// rank 2 is killed the launcher takes it (no process starts then), and it
// heals as rank 3 of generation 2.
func TestHealSpare(t *testing.T) {
	out, stderr := runHealJob(t, "kill:2:7:0;slow:0:20", "-spares", "1", "-epochs", "3")
	epochs, _, _ := survivedOutput(t, out)
	requireEachSampleOnce(t, epochs, 24)
	hs := healedOutput(t, out)
	require.Len(t, hs, 1, out)
	require.Equal(t, 4, hs[0].Joined[0].Name)
	require.Equal(t, "spare started with the job", hs[0].Joined[0].Why)
	require.Equal(t, 4.0, epochs[2]["ranks"], out)
	require.Equal(t, 1, strings.Count(stderr, "to join the job (spare started with the job)"), "the spare")
	require.NotContains(t, stderr, "to join the job (replaces", "no replacement: the spare was taken") // a new spare may start (TestHealSparesReplenished)
}

// A rank stopped with SIGSTOP (a hang) is removed within -timeout + 1 s and
// replaced; continued later, it is refused (a removed rank cannot come
// back without healing), while its replacement, a new identity, healed.
func TestHealStoppedRank(t *testing.T) {
	out, stderr := runHealJob(t, "stop:2:5:2500;slow:0:40", "-timeout", "1s", "-epochs", "4", "-heal")
	epochs, _, survived := survivedOutput(t, out)
	require.Len(t, epochs, 4, out)
	require.Len(t, survived, 1, out)
	require.Equal(t, 2, survived[0].FailedRank)
	require.Contains(t, stderr, "rank 2 was removed from the job at generation 1")
	hs := healedOutput(t, out)
	require.Len(t, hs, 1, out)
	require.Equal(t, 4, hs[0].Joined[0].Name)
	require.Equal(t, 4.0, epochs[3]["ranks"], out)
	requireEachSampleOnce(t, epochs, 24)
}

func TestHealFlags(t *testing.T) {
	tcp := &launch.Transport{Name: launch.TCP, MP: &launch.Setup{Flags: launch.Flags{Nnodes: 1}}}
	_, _, err := healFlags(tcp, launch.OnFailureRestart, false, true, 0, map[string]bool{"heal": true})
	require.ErrorContains(t, err, "-on-failure continue")
	_, _, err = healFlags(tcp, launch.OnFailureContinue, false, false, 17, map[string]bool{"spares": true})
	require.ErrorContains(t, err, "-spares 17")
	heal, spares, err := healFlags(tcp, launch.OnFailureContinue, false, false, 2, map[string]bool{"spares": true})
	require.NoError(t, err)
	require.True(t, heal, "-spares implies -heal")
	require.Equal(t, 2, spares)
	_, _, err = healFlags(tcp, launch.OnFailureContinue, true, true, 0, map[string]bool{"heal": true})
	require.ErrorContains(t, err, "-zero1")
	for _, name := range []string{launch.Shm, launch.Auto} {
		tr := &launch.Transport{Name: name, MP: &launch.Setup{Flags: launch.Flags{Nnodes: 1}}}
		heal, _, err = healFlags(tr, launch.OnFailureContinue, false, true, 0, map[string]bool{"heal": true})
		require.NoError(t, err, name)
		require.True(t, heal, name)
	}
	_, _, err = healFlags(&launch.Transport{Name: launch.Inproc}, launch.OnFailureContinue, false, true, 0, map[string]bool{"heal": true})
	require.ErrorContains(t, err, "one rank per process")
	nodes := &launch.Transport{Name: launch.TCP, MP: &launch.Setup{Flags: launch.Flags{Nnodes: 2}}}
	_, _, err = healFlags(nodes, launch.OnFailureContinue, false, false, 1, map[string]bool{"spares": true})
	require.ErrorContains(t, err, "-spares applies on one host")
	heal, _, err = healFlags(nodes, launch.OnFailureContinue, false, true, 0, map[string]bool{"heal": true})
	require.NoError(t, err, "-heal across node launchers over tcp")
	require.True(t, heal)
	nodesAuto := &launch.Transport{Name: launch.Auto, MP: &launch.Setup{Flags: launch.Flags{Nnodes: 2}}}
	heal, _, err = healFlags(nodesAuto, launch.OnFailureContinue, false, true, 0, map[string]bool{"heal": true})
	require.NoError(t, err, "-heal across node launchers over auto")
	require.True(t, heal)
}

// The text report of a heal names the joiner, why, its rank, the step,
// the pause and each sender's bytes.
func TestHealText(t *testing.T) {
	back, ready := 0.61, 0.2
	rec := healRecord{Healed: 2, Joined: []joinRecord{{Rank: 3, Name: 4, Pid: 77, Why: "replaces rank 2, which was killed by signal killed",
		BackSeconds: &back, ReadySeconds: &ready}}, AtStep: 12, Paused: 0.35, HealSecs: 0.02, StateBytes: 300, SentBytes: []int64{100, 100, 100, 0},
		SamplesRedone: 24}
	require.Equal(t, "heal at generation 2: rank 4 (pid 77, replaces rank 2, which was killed by signal killed) joined as rank 3, "+
		"back 0.61s after its start (0.20s after it was ready); training goes on from step 12, 0 steps lost, 24 samples redone, "+
		"paused 0.35s (heal 0.02s: 300 bytes of state; bytes sent: rank 0 100, rank 1 100, rank 2 100)", healText(rec))
	// Under ZeRO-1 the re-shard's bytes follow, by rank.
	rec.ReshardSentBytes, rec.ReshardBytes = []int64{0, 40, 0, 16}, 56
	require.True(t, strings.HasSuffix(healText(rec), "rank 2 100); optimizer state re-sharded: 56 bytes (rank 1 40, rank 3 16)"), healText(rec))
	// And the parameters the joiner held already, left out of heal's stream.
	rec.ParamsHeldBytes = 400
	require.True(t, strings.HasSuffix(healText(rec), "(rank 1 40, rank 3 16); parameters assembled with the re-shard, not in heal's stream: 400 bytes"), healText(rec))
}

// Rank 0 killed with -heal and -checkpoint: its replacement (with rank 0's
// cores, RANK=0) finds the job's own checkpoints and is not refused for
// them (it continues the job, it does not start one); it heals.
func TestHealRank0(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a tcp job of several seconds")
	}
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, "kill:0:7:0;slow:1:20")
	out, err := runTrain(t, survivorArgs(data, ck, "-heal", "-checkpoint-every", "4", "-epochs", "4")...)
	require.NoError(t, err, out)
	hs := healedOutput(t, out)
	require.Len(t, hs, 1, out)
	require.Equal(t, 4, hs[0].Joined[0].Name, "the first replacement heals")
	epochs, _, _ := survivedOutput(t, out)
	requireEachSampleOnce(t, epochs, 24)
}
