package hoststest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/testbed"
)

// restartRecord is the part of cmd/train's -json restart line these tests
// read.
type restartRecord struct {
	Restart         int    `json:"restart"`
	FailedRank      int    `json:"failed_rank"`
	FailedNode      *int   `json:"failed_node"`
	Reason          string `json:"reason"`
	Ranks           int    `json:"ranks"`
	Nodes           int    `json:"nodes"`
	Checkpoint      string `json:"checkpoint"`
	ResumedFromStep int64  `json:"resumed_from_step"`
}

// An elastic job across hosts (-max-restarts 1): one rank process on host
// 1 killed mid-training; the launchers of both hosts stop the job,
// restart it from the newest checkpoint on the same 4 ranks, and finish;
// the final parameters and optimizer state are bitwise those of an
// uninterrupted run of 4 ranks on one host resumed from that checkpoint.
func TestElasticRestartAcrossHosts(t *testing.T) {
	// 10 Mbit/s between the hosts: about 40 ms a step, so that the job is
	// still training when the rank is killed.
	bed := newBed(t, testbed.Config{Hosts: 2, Rate: "10mbit"})
	dir := t.TempDir()
	ck := filepath.Join(dir, "ck.safetensors")
	common := trainArgs("-algo", "ring", "-epochs", "3", "-json")
	nodes := startJob(t, bed, trainBin, append([]string{"-transport", "auto", "-ranks", "2", "-checkpoint", ck,
		"-checkpoint-every", "5", "-checkpoint-keep", "100", "-max-restarts", "1", "-timeout", "10s"}, common...)...)
	waitFor(t, nodes, time.Minute, "checkpoint at step 10", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ck.step10.safetensors"))
		return err == nil
	})
	ranks := children(t, bed.Host(1), nodes[1].cmd.Process.Pid)
	require.Len(t, ranks, 2, "host 1's rank processes\n%s", output(nodes))
	require.NoError(t, syscall.Kill(ranks[0], syscall.SIGKILL))
	waitJob(t, nodes, 2*time.Minute)
	requireSuccess(t, nodes)

	var restarts []restartRecord
	var last map[string]any
	sc := bufio.NewScanner(strings.NewReader(nodes[0].stdout.String()))
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(`"restart"`)) {
			var r restartRecord
			require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
			restarts = append(restarts, r)
			continue
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &last), sc.Text())
	}
	require.Len(t, restarts, 1, output(nodes))
	r := restarts[0]
	require.NotNil(t, r.FailedNode)
	require.Equal(t, 1, *r.FailedNode)
	require.Contains(t, []int{2, 3}, r.FailedRank)
	require.Equal(t, "was killed by signal killed", r.Reason)
	require.Equal(t, 4, r.Ranks)
	require.Equal(t, 2, r.Nodes)
	require.NotEmpty(t, r.Checkpoint, "resumed from the start")
	require.Equal(t, 60.0, last["global_step"], "the last epoch's line")

	ref := filepath.Join(t.TempDir(), "ref.safetensors")
	out, err := exec.Command(trainBin, append([]string{"-transport", "tcp", "-ranks", "4", "-resume", r.Checkpoint, "-checkpoint", ref}, common...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, dataSHA(t, ref), dataSHA(t, ck), "final parameters and optimizer state")
}

// children returns the processes on h whose parent is pid.
func children(t *testing.T, h *testbed.Host, pid int) []int {
	t.Helper()
	pids, err := h.Pids()
	require.NoError(t, err)
	var kids []int
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: the command name may hold spaces.
		_, rest, _ := bytes.Cut(b, []byte(") "))
		var state string
		var ppid int
		if _, err := fmt.Sscan(string(rest), &state, &ppid); err == nil && ppid == pid {
			kids = append(kids, p)
		}
	}
	return kids
}
