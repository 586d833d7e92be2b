package hoststest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/testbed"
)

// continueRecord is the part of cmd/train's -json line for a failure
// survived (-on-failure continue) these tests read.
type continueRecord struct {
	Continued         int     `json:"continued"`
	Generation        int     `json:"generation"`
	Ranks             int     `json:"ranks"`
	StepsLost         int64   `json:"steps_lost"`
	TrainingAgainUnix float64 `json:"training_again_unix"`
	Removed           []struct {
		Rank   int    `json:"rank"`
		Reason string `json:"reason"`
	} `json:"removed"`
}

// Survivors continue across hosts (-transport auto: shm within a host,
// tcp between; -on-failure continue -min-ranks 2): host 1 killed whole
// mid-training (its launcher and both ranks). Its ranks drop out together
// in one generation, each named with node 1 and its address; host 0's two
// ranks dial generation 1 (shm alone now: auto's choice for the ranks
// left) and finish every epoch with no step lost, every example once per
// epoch. It logs how long after the kill host 0 trained again.
func TestSurviveHostKilled(t *testing.T) {
	// 10 Mbit/s between the hosts: about 40 ms a step, so that the job is
	// still training when the host is killed.
	bed := newBed(t, testbed.Config{Hosts: 2, Rate: "10mbit"})
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck.safetensors")
	nodes := startJob(t, bed, trainBin, trainArgs("-transport", "auto", "-ranks", "2", "-algo", "ring", "-epochs", "3", "-json",
		"-checkpoint", ck, "-checkpoint-every", "5", "-checkpoint-keep", "100", "-timeout", "10s",
		"-on-failure", "continue", "-min-ranks", "2")...)
	waitFor(t, nodes, time.Minute, "checkpoint at step 10", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ck.step10.safetensors"))
		return err == nil
	})
	killed := time.Now()
	require.NoError(t, bed.KillHost(1))
	waitJob(t, nodes[:1], time.Minute)
	require.NoError(t, nodes[0].err, output(nodes[:1]))

	var survived []continueRecord
	var epochs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(nodes[0].stdout.String()))
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(`"continued"`)) {
			var c continueRecord
			require.NoError(t, json.Unmarshal(sc.Bytes(), &c), sc.Text())
			survived = append(survived, c)
			continue
		}
		var e map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		epochs = append(epochs, e)
	}
	require.Len(t, survived, 1, output(nodes[:1]))
	c := survived[0]
	again := time.Unix(0, int64(c.TrainingAgainUnix*1e9)).Sub(killed)
	t.Logf("host 0 trained again %.3f s after host 1 was killed\n%s", again.Seconds(), nodes[0].stderr.String())
	require.Equal(t, 1, c.Generation)
	require.Equal(t, 2, c.Ranks)
	require.Equal(t, int64(0), c.StepsLost)
	require.Len(t, c.Removed, 2)
	for i, l := range c.Removed {
		require.Equal(t, 2+i, l.Rank)
		require.Contains(t, l.Reason, "on node 1 (")
		require.Contains(t, l.Reason, bed.Host(1).Addr())
	}
	require.Len(t, epochs, 3)
	for _, e := range epochs {
		require.Equal(t, e["samples_used"], e["samples_distinct"], "an epoch used an example twice")
		require.Equal(t, 400.0, e["samples_used"])
	}
	require.Equal(t, 60.0, epochs[2]["global_step"])
	require.Contains(t, nodes[0].stderr.String(), "the job continues without node 1")
}

// Host 1 killed whole mid-training with -heal (tcp): the job continues on
// host 0's two ranks; host 1's launcher, started again on host 1, rejoins
// the running job — its two ranks join as ranks 4 and 5, grow the group
// back to 4 at a step boundary and heal from host 0's ranks across the
// link — and the job ends on 4 ranks, no step lost, every example once per
// epoch.
func TestSurviveHostRejoins(t *testing.T) {
	bed := newBed(t, testbed.Config{Hosts: 2, Rate: "10mbit"})
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck.safetensors")
	args := trainArgs("-transport", "tcp", "-ranks", "2", "-algo", "ring", "-epochs", "6", "-json",
		"-checkpoint", ck, "-checkpoint-every", "5", "-checkpoint-keep", "100", "-timeout", "10s",
		"-on-failure", "continue", "-min-ranks", "2", "-heal")
	nodes := startJob(t, bed, trainBin, args...)
	waitFor(t, nodes, time.Minute, "checkpoint at step 10", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ck.step10.safetensors"))
		return err == nil
	})
	require.NoError(t, bed.KillHost(1))
	waitFor(t, nodes[:1], time.Minute, "node 1 dropped", func() bool {
		return strings.Contains(nodes[0].stderr.String(), "the job continues without node 1")
	})
	restarted := time.Now()
	back := startNode(t, bed, 1, trainBin, args...)
	waitJob(t, []*node{nodes[0], back}, 2*time.Minute)
	all := []*node{nodes[0], back}
	require.NoError(t, nodes[0].err, output(all))
	require.NoError(t, back.err, output(all))
	var heals []map[string]any
	var epochs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(nodes[0].stdout.String()))
	for sc.Scan() {
		var e map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		switch {
		case e["healed"] != nil:
			heals = append(heals, e)
		case e["epoch"] != nil:
			epochs = append(epochs, e)
		}
	}
	require.Len(t, heals, 1, output(all))
	joined := heals[0]["joined"].([]any)
	require.Len(t, joined, 2)
	for _, j := range joined {
		require.Equal(t, 1.0, j.(map[string]any)["node"])
	}
	t.Logf("host 1's launcher restarted; the job ended %.3f s later (heal %v s, %v bytes of state)\n%s",
		time.Since(restarted).Seconds(), heals[0]["heal_seconds"], heals[0]["state_bytes"], nodes[0].stderr.String())
	require.Len(t, epochs, 6)
	for _, e := range epochs {
		require.Equal(t, e["samples_used"], e["samples_distinct"], "an epoch used an example twice")
		require.Equal(t, 400.0, e["samples_used"])
	}
	require.Equal(t, 4.0, epochs[5]["ranks"])
	require.Contains(t, nodes[0].stderr.String(), "node 1 is back in the job with ranks 4, 5")
}
