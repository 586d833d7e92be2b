package hoststest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/safetensors"
	"github.com/ringddp/ringddp/internal/testbed"
)

// trainArgs is a small, fast training job: 12,730 parameters, 20 steps
// per epoch.
func trainArgs(more ...string) []string {
	return append([]string{"-data", dataDir, "-batch", "20", "-hidden", "16", "-eval-batch", "25", "-lr", "0.05", "-out", ""}, more...)
}

// Two hosts of two ranks each with -transport auto: shm between the ranks
// of a host, tcp between the hosts; the job forms and trains.
func TestTrainAcrossHosts(t *testing.T) {
	bed := newBed(t, testbed.Config{Hosts: 2, Rate: "1gbit"})
	nodes := startJob(t, bed, trainBin, trainArgs("-transport", "auto", "-ranks", "2", "-max-steps", "10")...)
	waitJob(t, nodes, time.Minute)
	requireSuccess(t, nodes)
	out := nodes[0].stdout.String()
	require.Contains(t, out, "with DDP on 4 shm+tcp ranks (-transport auto: shm within hosts, tcp between)", out)
	require.Contains(t, out, "stopped at -max-steps 10", out)
	require.Contains(t, nodes[1].stderr.String(), "joined node 0's launcher at "+bed.Host(0).Addr()+":"+masterPort)
}

// With one algorithm asked for (-algo ring), 2 hosts × 2 ranks (shm within,
// tcp between) end bitwise where 4 ranks on one host do: the same
// reductions in the same order, whatever carries the bytes (the method of
// cmd/train's TestSameAlgorithmSameBitsOnEveryTransport).
func TestSameBitsAsOneHost(t *testing.T) {
	bed := newBed(t, testbed.Config{Hosts: 2, Rate: "1gbit"})
	dir := t.TempDir()
	hosts, one := filepath.Join(dir, "hosts.safetensors"), filepath.Join(dir, "one.safetensors")
	nodes := startJob(t, bed, trainBin, trainArgs("-transport", "auto", "-ranks", "2", "-algo", "ring", "-epochs", "1", "-checkpoint", hosts)...)
	waitJob(t, nodes, time.Minute)
	requireSuccess(t, nodes)
	cmd := exec.Command(trainBin, trainArgs("-transport", "tcp", "-ranks", "4", "-algo", "ring", "-epochs", "1", "-checkpoint", one)...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, dataSHA(t, one), dataSHA(t, hosts), "checkpoint tensors of 2 hosts × 2 ranks and of 1 host × 4 ranks")
}

// dataSHA is the SHA-256 of a checkpoint's tensors: parameters and
// optimizer state.
func dataSHA(t *testing.T, path string) string {
	t.Helper()
	f, err := safetensors.ReadFile(path)
	require.NoError(t, err)
	return f.DataSHA256()
}

// waitFor polls cond every 10 ms until it holds, failing the test with
// the job's output after d or when a launcher exits first.
func waitFor(t *testing.T, nodes []*node, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		for i, n := range nodes {
			select {
			case <-n.done:
				t.Fatalf("node %d's launcher exited before %s\n%s", i, what, output(nodes))
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v\n%s", what, d, output(nodes))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// longJob starts 2 hosts × 2 ranks training for far longer than a test
// runs, with a checkpoint every 5 steps, and returns once step 10's is
// written.
func longJob(t *testing.T, bed *testbed.Bed, more ...string) ([]*node, string) {
	t.Helper()
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck.safetensors")
	nodes := startJob(t, bed, trainBin, trainArgs(append([]string{"-transport", "auto", "-ranks", "2", "-algo", "ring",
		"-epochs", "1000", "-checkpoint", ck, "-checkpoint-every", "5", "-checkpoint-keep", "1000", "-timeout", "5s"}, more...)...)...)
	waitFor(t, nodes, time.Minute, "checkpoint at step 10", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ck.step10.safetensors"))
		return err == nil
	})
	return nodes, dir
}

// A host lost mid-training (every process on host 1 killed, its
// launcher included): host 0's launcher ends, non-zero, within 20 s (its
// peers' launchers beat in its store every 500 ms; 5 s without a beat is a
// lost node), its last line naming the lost node, its address and ranks.
func TestHostKilled(t *testing.T) {
	t.Parallel() // it mostly waits (as TestLinkCut): the two run together
	bed := newBed(t, testbed.Config{Hosts: 2, Rate: "1gbit"})
	nodes, _ := longJob(t, bed)
	t0 := time.Now()
	require.NoError(t, bed.KillHost(1))
	waitJob(t, nodes[:1], 20*time.Second)
	t.Logf("host 0's launcher ended %v after host 1 was killed:\n%s", time.Since(t0), nodes[0].stderr.String())
	require.Error(t, nodes[0].err)
	last := lastLine(nodes[0].stderr.String())
	for _, want := range []string{"node 1", "10.77.0.2", "was lost with its ranks 2, 3"} {
		require.Contains(t, last, want)
	}
}

// Host 1's link cut mid-training (nothing passes either way, no
// connection is told): both launchers end, non-zero, within 30 s, each
// naming the other node as lost (the launchers' heartbeats stop) or the
// no-progress timeout (-timeout 5s) of its ranks, whichever it saw first:
// no hang.
func TestLinkCut(t *testing.T) {
	t.Parallel()
	bed := newBed(t, testbed.Config{Hosts: 2, Rate: "1gbit"})
	nodes, _ := longJob(t, bed)
	t0 := time.Now()
	require.NoError(t, bed.CutLink(1))
	waitJob(t, nodes, 30*time.Second)
	t.Logf("launchers ended %v after the link was cut (node 0 %v, node 1 %v after its start)\n%s",
		time.Since(t0), nodes[0].took, nodes[1].took, output(nodes))
	for i, n := range nodes {
		require.Error(t, n.err, "node %d", i)
		out := n.stderr.String()
		require.True(t, strings.Contains(out, "was lost with its ranks") || strings.Contains(out, "no progress for 5s"),
			"node %d names neither the lost node nor the no-progress timeout:\n%s", i, out)
		require.Contains(t, lastLine(out), "node", "node %d's last line", i)
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
