package hoststest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/datasets"
	"github.com/ringddp/ringddp/internal/testbed"
)

// The commands, built once for the package by TestMain (empty where no
// bed can run), and a small MNIST-style data directory every host reads
// (the machine's file system stands for storage the hosts share).
var (
	trainBin, benchBin, dataDir string
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if testbed.Unavailable() != "" || testing.Short() || raceEnabled {
		return m.Run() // every test skips, saying why (newBed)
	}
	sweepTemp()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", tempPrefix, os.Getpid()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	trainBin, benchBin, dataDir = filepath.Join(dir, "train"), filepath.Join(dir, "bench"), filepath.Join(dir, "mnist")
	for bin, pkg := range map[string]string{trainBin: "cmd/train", benchBin: "cmd/bench"} {
		out, err := exec.Command("go", "build", "-o", bin, "github.com/ringddp/ringddp/"+pkg).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	if err := writeMNIST(dataDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// tempPrefix starts the name of the directory of a run's binaries and
// data: tempPrefix<pid>-<random>.
const tempPrefix = "ringddp-hoststest-"

// sweepTemp removes the directories of earlier runs whose process no
// longer runs (a test binary killed before its deferred removal).
func sweepTemp() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, d := range dirs {
		if testbed.Leftover(filepath.Base(d), tempPrefix) {
			_ = os.RemoveAll(d)
		}
	}
}

// writeMNIST writes a synthetic MNIST-style IDX directory: 400 training
// and 100 test images of 28×28 in 10 classes.
func writeMNIST(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	all := datasets.Synthetic(500, 28, 28, 10, 5)
	for name, ds := range map[string]*datasets.Dataset{"train": all.Slice(0, 400), "t10k": all.Slice(400, 500)} {
		var images, labels []byte
		for i := range ds.Len() {
			images = append(images, ds.Image(i)...)
			labels = append(labels, byte(ds.Label(i)))
		}
		var ib, lb bytes.Buffer
		if err := datasets.WriteIDX(&ib, []int{ds.Len(), 28, 28}, images); err != nil {
			return err
		}
		if err := datasets.WriteIDX(&lb, []int{ds.Len()}, labels); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+"-images-idx3-ubyte"), ib.Bytes(), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+"-labels-idx1-ubyte"), lb.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// newBed builds a bed for a test (testbed.New), or skips the test under
// the race detector: the commands it runs are built without it, so a race
// run would repeat the plain run's work and find nothing more.
func newBed(t *testing.T, c testbed.Config) *testbed.Bed {
	t.Helper()
	if raceEnabled {
		t.Skip("the test bed's jobs run in the plain go test (the commands are built without -race)")
	}
	return testbed.New(t, c)
}

// masterPort is node 0's launchers' rendezvous port: every bed has
// network namespaces of its own, so any port is free there.
const masterPort = "29500"

// secret is the job's RINGDDP_SECRET, as a user exports it on every host.
const secret = "hoststest shared secret 0123456789abcdef"

// node is one host's launcher process.
type node struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	done           chan struct{}
	err            error
	took           time.Duration
}

// startJob starts bin on every host of bed as one node of a job:
// -nnodes, -node-rank and -master (host 0's address) after args, the
// secret in the environment.
func startJob(t *testing.T, bed *testbed.Bed, bin string, args ...string) []*node {
	t.Helper()
	nodes := make([]*node, len(bed.Hosts()))
	for i := range nodes {
		nodes[i] = startNode(t, bed, i, bin, args...)
	}
	return nodes
}

// startNode starts bin on host i of bed as node i of a job, as startJob
// does (also to start a node's launcher again).
func startNode(t *testing.T, bed *testbed.Bed, i int, bin string, args ...string) *node {
	t.Helper()
	hosts := bed.Hosts()
	master := hosts[0].Addr() + ":" + masterPort
	a := append(append([]string(nil), args...), "-nnodes", strconv.Itoa(len(hosts)), "-node-rank", strconv.Itoa(i), "-master", master)
	n := &node{cmd: hosts[i].Command(context.Background(), bin, a...), done: make(chan struct{})}
	n.cmd.Env = append(os.Environ(), "RINGDDP_SECRET="+secret)
	n.cmd.Stdout, n.cmd.Stderr = &n.stdout, &n.stderr
	t0 := time.Now()
	require.NoError(t, n.cmd.Start())
	go func() {
		n.err = n.cmd.Wait()
		n.took = time.Since(t0)
		close(n.done)
	}()
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		<-n.done
	})
	return n
}

// waitJob waits for every launcher to exit, at most d in all, and fails
// the test, with every node's output, if one is still running.
func waitJob(t *testing.T, nodes []*node, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for i, n := range nodes {
		select {
		case <-n.done:
		case <-deadline:
			t.Fatalf("node %d's launcher still running after %v\n%s", i, d, output(nodes))
		}
	}
}

// output is every node's standard output and error, for failure messages.
func output(nodes []*node) string {
	var b bytes.Buffer
	for i, n := range nodes {
		fmt.Fprintf(&b, "--- node %d (exit %v) stdout:\n%s--- node %d stderr:\n%s", i, n.err, n.stdout.String(), i, n.stderr.String())
	}
	return b.String()
}

// requireSuccess fails the test unless every node's launcher exited 0.
func requireSuccess(t *testing.T, nodes []*node) {
	t.Helper()
	for i, n := range nodes {
		require.NoError(t, n.err, "node %d\n%s", i, output(nodes))
	}
}

// syncBuffer is a bytes.Buffer safe for a process's writers and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
