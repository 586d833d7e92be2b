package launch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// A rank removes RINGDDP_SECRET from its environment once connected:
// neither it nor a process it starts afterwards sees it.
func TestRankDropsSecret(t *testing.T) {
	t.Parallel()
	cfg, stdout, stderr := helperConfig(2, "secretgone")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Run(ctx, cfg); err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for r := range 2 {
		want := fmt.Sprintf("rank %d: child sees %s: false: %s in own env: false", r, EnvSecret, EnvSecret)
		if r > 0 {
			want = fmt.Sprintf("[rank %d] %s", r, want)
		}
		if !slices.Contains(lines(stdout.String()), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

// A rank of a job of two nodes, turned hostile, cannot reach the
// launchers' rendezvous with the secret it holds (issue 31's injected
// plan): it was given one derived from the job's, and the job runs on.
func TestRankCannotWritePlans(t *testing.T) {
	t.Parallel()
	master := loopbackMaster(t)
	nodes := []*joinNode{newJoinNode(0, 1, master, joinTestSecret), newJoinNode(1, 1, master, joinTestSecret)}
	outs := make([]*lockedBuffer, 2)
	for i, n := range nodes {
		var stdout *lockedBuffer
		n.cfg, stdout, n.stderr = helperConfig(1, "attack", "RINGDDP_HELPER_LAUNCHERS="+master)
		n.cfg.Nnodes, n.cfg.NodeRank, n.cfg.Master = 2, i, master
		n.cfg.Getenv = func(k string) string { return map[string]string{EnvSecret: joinTestSecret}[k] }
		outs[i] = stdout
	}
	runJoin(nodes...)
	for i, n := range nodes {
		if n.err != nil {
			t.Fatalf("node %d: %v\nstderr:\n%s", i, n.err, n.stderr)
		}
		want := fmt.Sprintf("rank %d: attack refused: true", i)
		if i > 0 {
			want = fmt.Sprintf("[rank %d] %s", i, want)
		}
		if !slices.Contains(lines(outs[i].String()), want) {
			t.Errorf("node %d's stdout lacks %q:\n%s", i, want, outs[i])
		}
	}
}
