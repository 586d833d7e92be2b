package launch

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/mixed"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/shm"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
)

func TestAutoChoice(t *testing.T) {
	for _, c := range []struct {
		hosts []string
		want  string
	}{
		{[]string{"a", "a", "a"}, dialShm},
		{[]string{"a", "b", "c"}, dialTCP},
		{[]string{"a"}, dialTCP},
		{[]string{"a", "a", "b", "b"}, dialMixed},
		{[]string{"a", "b", "b"}, dialMixed},
		{[]string{"rank 0", "rank 1"}, dialTCP},
	} {
		if got := autoChoice(c.hosts); got != c.want {
			t.Errorf("autoChoice(%q) = %s, want %s", c.hosts, got, c.want)
		}
	}
}

// TestAutoPerHost: -transport auto over ranks (goroutines here) that
// RINGDDP_NODE places on simulated hosts: one host is shm, one rank per
// host tcp, and a job spanning hosts with several ranks on a host a
// mixed endpoint (shm within the host, tcp between); each all-reduces.
func TestAutoPerHost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shm needs linux")
	}
	for _, c := range []struct {
		nodes []string
		want  func(Endpoint) bool
		what  string
	}{
		{[]string{"", "", ""}, isShm, "*shm.Conn"},
		{[]string{"a", "a", "a"}, isShm, "*shm.Conn"},
		{[]string{"a", "b", "c"}, isTCP, "*tcp.Conn"},
		{[]string{"a", "a", "b", "b"}, isMixed, "*mixed.Conn"},
		{[]string{"a", "b", "b"}, isMixed, "*mixed.Conn"},
	} {
		t.Run(fmt.Sprint(c.nodes), func(t *testing.T) {
			conns := connectAuto(t, c.nodes)
			for r, conn := range conns {
				e := conn.(*Conn).Endpoint
				if !c.want(e) {
					t.Errorf("rank %d: %T, want %s", r, e, c.what)
				}
				if mc, ok := e.(*mixed.Conn); ok {
					if mc.NodeName() != c.nodes[r] {
						t.Errorf("rank %d: node %q, want %q", r, mc.NodeName(), c.nodes[r])
					}
					if got := conn.(*Conn).WireProtection(); got != tcp.DefaultWireProtection {
						t.Errorf("rank %d: wire protection %q", r, got)
					}
				}
			}
			checkAllReduce(t, conns)
		})
	}
}

func isShm(e Endpoint) bool   { _, ok := e.(*shm.Conn); return ok }
func isTCP(e Endpoint) bool   { _, ok := e.(*tcp.Conn); return ok }
func isMixed(e Endpoint) bool { _, ok := e.(*mixed.Conn); return ok }

// connectAuto connects len(nodes) ranks with -transport auto, rank r
// with RINGDDP_NODE nodes[r].
func connectAuto(t *testing.T, nodes []string) []transport.Conn {
	t.Helper()
	n := len(nodes)
	port := freeLoopbackPort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conns := make([]transport.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := rendezvous.Env{Rank: r, WorldSize: n, LocalRank: r, LocalWorldSize: n, MasterAddr: "127.0.0.1",
				MasterPort: port, Secret: []byte("launch transport test secret"), Found: true, Node: nodes[r]}
			conns[r], _, errs[r] = Connect(ctx, Options{Timeout: 10 * time.Second, Env: &env, Transport: Auto,
				RunID: "auto-per-host", Getenv: func(string) string { return "" }})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			for _, c := range conns {
				if c != nil {
					_ = c.Close()
				}
			}
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return conns
}

// Ranks whose host -transport auto cannot tell (hostsOf's "rank <r>")
// are named in a warning; known hosts give none.
func TestUnknownHostsWarning(t *testing.T) {
	if got := unknownHosts([]string{"a", "a", "b"}); got != "" {
		t.Errorf("known hosts: %q", got)
	}
	if got := unknownHosts([]string{"a", "rank 1", "a", "rank 3"}); !strings.Contains(got, "rank(s) 1, 3 is unknown") {
		t.Errorf("unknown hosts: %q", got)
	}
}
