package launch

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// childWithRank finds the pid of this process's child that runs as rank
// of the job marked by marker (its environment has RANK=<rank> and
// marker: parallel tests start ranks too), on Linux.
func childWithRank(t *testing.T, rank int, marker string) int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	me := strconv.Itoa(os.Getpid())
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[1] != me {
			continue
		}
		dir := filepath.Dir(s)
		env, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil {
			continue
		}
		kvs := bytes.Split(env, []byte{0})
		has := func(want string) bool {
			for _, kv := range kvs {
				if string(kv) == want {
					return true
				}
			}
			return false
		}
		if has("RANK="+strconv.Itoa(rank)) && has(marker) {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			return pid
		}
	}
	t.Fatalf("no child runs rank %d", rank)
	return 0
}

// TestLauncherNamesStoppedRank stops a rank with SIGSTOP in the middle of
// a loop of all-reduces: the launcher's error names it, says it was
// stopped and which call the others were waiting for, and the job ends
// about the timeout after the stop (the timeout, tcp's wait of up to a
// second for the stopped peer to acknowledge the abort, and no grace
// period: the stopped rank is continued with its SIGTERM).
func TestLauncherNamesStoppedRank(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the rank's process in /proc")
	}
	t.Parallel()
	const n, timeout = 3, 2 * time.Second
	marker := "RINGDDP_ROOTCAUSE_TEST=" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg, stdout, stderr := helperConfig(n, "loop", "RINGDDP_HELPER_TIMEOUT="+timeout.String(), "RINGDDP_HELPER_CONNECT_TIMEOUT=30s", marker)
	var once sync.Once
	ready, readyCount := make(chan struct{}), 0
	var mu sync.Mutex
	stdout.onLine = func(s string) {
		if strings.HasSuffix(s, "ready") {
			mu.Lock()
			if readyCount++; readyCount == n {
				once.Do(func() { close(ready) })
			}
			mu.Unlock()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	var stopped time.Time
	select {
	case <-ready:
		pid := childWithRank(t, 1, marker)
		t.Logf("stopping pid %d", pid)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped = time.Now()
	case err := <-done:
		t.Fatalf("Run ended before every rank was ready: %v\n%s", err, stderr)
	}
	err := <-done
	took := time.Since(stopped)
	if err == nil {
		t.Fatal("Run succeeded with a stopped rank")
	}
	want := regexp.MustCompile(`^launch: rank 1 \(pid \d+\) was stopped \(SIGSTOP or a debugger\) and never completed #\d+ AllReduce\(float32 × 65536, Sum\)`)
	if !want.MatchString(err.Error()) {
		t.Errorf("error %q does not name the stopped rank and its call\nstderr:\n%s", err, stderr)
	}
	if took > timeout+1500*time.Millisecond {
		t.Errorf("the job ended %v after the stop, want within %v", took, timeout+1500*time.Millisecond)
	}
	t.Logf("%v after the stop: %v", took.Round(time.Millisecond), err)
}

// Count and listText put the noun in the plural unless there is one.
func TestPlural(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Count(0, "rank"), "0 ranks"}, {Count(1, "node"), "1 node"}, {Count(2, "node"), "2 nodes"},
		{Count(1, "more connection"), "1 more connection"}, {Count(3, "more connection"), "3 more connections"},
		{Count(-1, "step"), "-1 steps"},
		{listText("node", []int{1}), "node 1"}, {listText("node", []int{1, 2}), "nodes 1, 2"},
		{ranksText([]int{2, 3}), "ranks 2, 3"}, {ranksText([]int{0}), "rank 0"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

// Connect's errors say "launch:" once: an unknown transport (decided
// before any store or dial) is "launch: transport ...", not "launch:
// launch: ...".
func TestConnectErrorPrefixOnce(t *testing.T) {
	env := rendezvous.Env{Rank: 0, WorldSize: 1, LocalWorldSize: 1, Found: true}
	_, _, err := Connect(context.Background(), Options{Env: &env, Insecure: true, Transport: "bogus",
		Getenv: func(string) string { return "" }, Warnings: io.Discard})
	if err == nil || !strings.HasPrefix(err.Error(), `launch: transport "bogus": unknown`) || strings.Count(err.Error(), "launch:") != 1 {
		t.Fatalf("Connect = %v, want one launch: prefix naming the unknown transport", err)
	}
}
