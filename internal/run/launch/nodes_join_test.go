package launch

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Misconfigurations of a job of two nodes, both launchers in this process
// over loopback: each ends on both nodes within seconds (well under the
// 15 s promised), with an error that names it.

const joinTestSecret = "the secret both nodes share, 32+ bytes"

// joinNode is one node's launcher in a join test.
type joinNode struct {
	cfg    Config
	stderr *lockedBuffer
	err    error
	took   time.Duration
}

// newJoinNode is the launcher of node of a 2-node job of ranks helper
// ranks each, meeting at master with secret.
func newJoinNode(node, ranks int, master, secret string) *joinNode {
	cfg, _, stderr := helperConfig(ranks, "allreduce")
	cfg.Nnodes, cfg.NodeRank, cfg.Master = 2, node, master
	cfg.Grace = time.Second
	cfg.JoinTimeout = 20 * time.Second
	cfg.joinReport, cfg.rejectedGrace = 500*time.Millisecond, time.Second
	cfg.Getenv = func(k string) string { return map[string]string{EnvSecret: secret, EnvRunID: "join-test"}[k] }
	return &joinNode{cfg: cfg, stderr: stderr}
}

// start runs n's launcher; wait for it with the WaitGroup.
func (n *joinNode) start(wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		t0 := time.Now()
		n.err = Run(ctx, n.cfg)
		n.took = time.Since(t0)
	}()
}

// runJoin runs the launchers together.
func runJoin(nodes ...*joinNode) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		n.start(&wg)
	}
	wg.Wait()
}

// expectErr checks that n failed within limit with an error holding every
// one of wants.
func (n *joinNode) expectErr(t *testing.T, limit time.Duration, wants ...string) {
	t.Helper()
	if n.err == nil {
		t.Errorf("node %d: no error\nstderr:\n%s", n.cfg.NodeRank, n.stderr)
		return
	}
	for _, w := range wants {
		if !strings.Contains(n.err.Error(), w) {
			t.Errorf("node %d: error %q lacks %q\nstderr:\n%s", n.cfg.NodeRank, n.err, w, n.stderr)
		}
	}
	t.Logf("node %d failed after %v: %v", n.cfg.NodeRank, n.took.Round(time.Millisecond), n.err)
	if n.took > limit {
		t.Errorf("node %d took %v to fail, want at most %v", n.cfg.NodeRank, n.took, limit)
	}
}

func loopbackMaster(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(freeLoopbackPort(t)) }

func TestJoinWrongSecret(t *testing.T) {
	t.Parallel()
	master := loopbackMaster(t)
	n0, n1 := newJoinNode(0, 1, master, joinTestSecret), newJoinNode(1, 1, master, "another secret, just as long as it")
	runJoin(n0, n1)
	n1.expectErr(t, 5*time.Second, "joining node 0's launcher at "+master, "authentication failed", "every node needs the same RINGDDP_SECRET")
	n0.expectErr(t, 5*time.Second, "node 1 did not join", "1 failed authentication", "from 127.0.0.1", "another RINGDDP_SECRET")
	if !strings.Contains(n0.stderr.String(), "turned away 1 more connection;") {
		t.Errorf("node 0 did not report the refusal as it happened:\n%s", n0.stderr)
	}
}

func TestJoinDifferentRanks(t *testing.T) {
	t.Parallel()
	master := loopbackMaster(t)
	n0, n1 := newJoinNode(0, 2, master, joinTestSecret), newJoinNode(1, 1, master, joinTestSecret)
	runJoin(n0, n1)
	want := "every node must run as many ranks (-ranks) as node 0's 2: node 1 has -ranks 1"
	n0.expectErr(t, 5*time.Second, want)
	n1.expectErr(t, 15*time.Second, "node 0 ended the job", want)
}

func TestJoinDifferentNnodes(t *testing.T) {
	t.Parallel()
	master := loopbackMaster(t)
	n0, n1 := newJoinNode(0, 1, master, joinTestSecret), newJoinNode(1, 1, master, joinTestSecret)
	n1.cfg.Nnodes = 3
	runJoin(n0, n1)
	want := "every node must be given the same -nnodes as node 0's 2: node 1 has -nnodes 3"
	n0.expectErr(t, 5*time.Second, want)
	n1.expectErr(t, 15*time.Second, "node 0 ended the job", want)
}

// hostAddr is a non-loopback IPv4 address of this host ("" if none).
func hostAddr() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return ""
}

// Node 0 given -master 127.0.0.1 while node 1 dials node 0's real address.
func TestJoinLoopbackMaster(t *testing.T) {
	t.Parallel()
	ip := hostAddr()
	if ip == "" {
		t.Skip("no non-loopback IPv4 address on this host")
	}
	port := strconv.Itoa(freeLoopbackPort(t))
	n0, n1 := newJoinNode(0, 1, "127.0.0.1:"+port, joinTestSecret), newJoinNode(1, 1, ip+":"+port, joinTestSecret)
	runJoin(n0, n1)
	want := "node 1 dials node 0 at -master " + ip + ":" + port + ", but node 0 was given -master 127.0.0.1:" + port + ", a loopback address"
	n0.expectErr(t, 5*time.Second, want)
	n1.expectErr(t, 15*time.Second, "node 0 ended the job", want)
}

// Two launchers given -node-rank 0 (on one host here: the second finds the
// port taken and asks who holds it).
func TestJoinTwoNodeZeros(t *testing.T) {
	t.Parallel()
	var a, b *joinNode
	for try := 0; ; try++ {
		master := loopbackMaster(t)
		a, b = newJoinNode(0, 1, master, joinTestSecret), newJoinNode(0, 1, master, joinTestSecret)
		var wg sync.WaitGroup
		a.start(&wg)
		waitListening(t, master)
		b.start(&wg)
		wg.Wait()
		// The port picked was free a moment before; a parallel test that
		// took it in between (freeport picks at random) makes both
		// launchers find "another program": pick another port then.
		if try == 2 || a.err == nil || !strings.Contains(a.err.Error(), "another program holds the port") {
			break
		}
		t.Logf("port %s was taken by another test meanwhile: %v; again on another port", master, a.err)
	}
	b.expectErr(t, 5*time.Second, "already leads this job there as node 0: were two launchers given -node-rank 0?")
	a.expectErr(t, 10*time.Second, "also runs as node 0 of this job", "were two launchers given -node-rank 0?")
}

// Two launchers given -node-rank 1: the second to join is refused.
func TestJoinTwoNodeOnes(t *testing.T) {
	t.Parallel()
	master := loopbackMaster(t)
	n0, n1, dup := newJoinNode(0, 1, master, joinTestSecret), newJoinNode(1, 1, master, joinTestSecret), newJoinNode(1, 1, master, joinTestSecret)
	runJoin(n0, n1, dup)
	first, second := n1, dup
	if n1.err != nil {
		first, second = dup, n1
	}
	second.expectErr(t, 5*time.Second, "another launcher joined the job as node 1 already: were two launchers given -node-rank 1?")
	if n0.err != nil || first.err != nil {
		t.Errorf("the job of node 0 and the first node 1 failed: %v; %v\nstderr 0:\n%s", n0.err, first.err, n0.stderr)
	}
}

// The master port taken on node 0 by a program that accepts connections
// and says nothing: node 0 says so at once, node 1 after one report
// interval.
func TestJoinMasterPortTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // holds it open, silent
		}
	}()
	master := ln.Addr().String()
	n0, n1 := newJoinNode(0, 1, master, joinTestSecret), newJoinNode(1, 1, master, joinTestSecret)
	runJoin(n0, n1)
	n0.expectErr(t, 5*time.Second, "hosting the launchers' rendezvous at "+master, "address already in use", "another program holds the port")
	n1.expectErr(t, 5*time.Second, "something at "+master+" accepts connections but has not answered as node 0's launcher", "another program")
}

// A node alone says whom it waits for as it waits, and gives up after the
// join timeout naming them.
func TestJoinWaitingReports(t *testing.T) {
	t.Parallel()
	n0 := newJoinNode(0, 1, loopbackMaster(t), joinTestSecret)
	n1 := newJoinNode(1, 1, loopbackMaster(t), joinTestSecret) // nothing listens there
	for _, n := range []*joinNode{n0, n1} {
		n.cfg.JoinTimeout = 1500 * time.Millisecond
	}
	runJoin(n0, n1)
	n0.expectErr(t, 5*time.Second, "node 1 did not join within 1.5s")
	n1.expectErr(t, 5*time.Second, "node 0's launcher did not answer at "+n1.cfg.Master+" within 1.5s", "connection refused")
	if !strings.Contains(n0.stderr.String(), "launch: node 0: still waiting for node 1 at "+n0.cfg.Master) {
		t.Errorf("node 0 did not say whom it waits for:\n%s", n0.stderr)
	}
	if !strings.Contains(n1.stderr.String(), "launch: node 1: still waiting for node 0's launcher at "+n1.cfg.Master) ||
		!strings.Contains(n1.stderr.String(), "connection refused") {
		t.Errorf("node 1 did not say what it waits for, and why:\n%s", n1.stderr)
	}
}

// waitListening waits until addr accepts connections.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if portOpen(addr) {
			return
		}
	}
	t.Fatalf("nothing listens at %s", addr)
}
