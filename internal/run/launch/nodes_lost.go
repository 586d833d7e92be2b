package launch

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// A lost node: a node whose launcher did not come back to node 0 after an
// attempt (killed with its host, cut off by the network). Its ranks
// vanished with it, so node 0's own ranks fail first, each with the
// connection it lost ("rank 2 failed: connection lost"): those are
// consequences. The root cause node 0 names is the node, by its index and
// the address it joined from (nodeAddr, reported when it joined), and the
// ranks it ran.
//
// Node 0 knows a node is lost without waiting Elastic.RejoinTimeout for
// its report: every other node's launcher beats, adding 1 to its counter
// elastic/alive/<node> in node 0's store every Config.heartbeat (500 ms),
// for as long as it runs. While node 0 waits for a node's report after an
// attempt it reads that counter as often; one that has not moved for
// Config.heartbeatLost (5 s) means the launcher is gone (killed, its host
// down, the link cut), and node 0 stops waiting for it. A launcher that
// is alive beats while its ranks stop, however long that takes. The other
// way round, a node whose beats node 0's store has not taken for
// Config.heartbeatLost takes node 0 for lost: it stops its ranks and ends
// naming node 0, its address (-master) and its ranks, instead of waiting
// out the rendezvous' timeouts.

// Defaults of Config's heartbeat timings.
const (
	defaultHeartbeat     = 500 * time.Millisecond
	defaultHeartbeatLost = 5 * time.Second
)

// aliveKey is node's heartbeat counter.
func aliveKey(node int) string { return "elastic/alive/" + strconv.Itoa(node) }

// heartbeat beats for this node (not node 0) until ctx ends, and calls
// lost with node 0's loss once no beat has been taken for
// Config.heartbeatLost.
func (r *nodeRdzv) heartbeat(ctx context.Context, lost func(error)) {
	t := time.NewTicker(r.cfg.heartbeat)
	defer t.Stop()
	ok := time.Now()
	for {
		c, cancel := context.WithTimeout(ctx, r.cfg.heartbeat)
		_, err := r.store.Add(c, aliveKey(r.node), 1)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			ok = time.Now()
		case time.Since(ok) >= r.cfg.heartbeatLost:
			lost(r.node0Lost(fmt.Sprintf("its launcher's rendezvous stopped answering (no heartbeat taken for %v: %v)", r.cfg.heartbeatLost, err)))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// node0Lost is node 0's loss, for reason.
func (r *nodeRdzv) node0Lost(reason string) *NodeLostError {
	n0 := &NodeLostError{Node: 0, Addr: r.cfg.Master, Reason: reason}
	for k := range r.cfg.Ranks {
		n0.Ranks = append(n0.Ranks, k)
	}
	return n0
}

// watchAlive, on node 0, reads node's heartbeat counter every
// Config.heartbeat until the returned stop is called, and calls lost once
// the counter has not moved for Config.heartbeatLost. stop says whether
// lost was called.
func (r *nodeRdzv) watchAlive(ctx context.Context, node int, lost func()) (stop func() bool) {
	ctx, cancel := context.WithCancel(ctx)
	var fired bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.cfg.heartbeat)
		defer t.Stop()
		last, moved := int64(-1), time.Now()
		for {
			c, cancelRead := context.WithTimeout(ctx, r.cfg.heartbeat)
			v, err := r.store.Add(c, aliveKey(node), 0)
			cancelRead()
			if err == nil && v != last {
				last, moved = v, time.Now()
			}
			if time.Since(moved) >= r.cfg.heartbeatLost {
				fired = true
				lost()
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() bool {
		cancel()
		wg.Wait()
		return fired
	}
}

// maxAddrLen bounds a node's reported address, in bytes.
const maxAddrLen = 512

// NodeLostError is a node lost during an attempt: the root cause of that
// attempt's failure when no node reported a failure of its own.
type NodeLostError struct {
	Node   int    // its -node-rank when the job started
	Addr   string // "host (ip)" as it reported when it joined; "" unknown
	Ranks  []int  // the ranks it ran in the attempt
	Reason string // why it counts as lost: "its launcher did not come back within 30s"
}

func (e *NodeLostError) Error() string {
	s := fmt.Sprintf("node %d", e.Node)
	if e.Addr != "" {
		s += " (" + e.Addr + ")"
	}
	return s + " was lost with its " + ranksText(e.Ranks) + ": " + e.Reason
}

// nodeAddr is this host as node 0 knows it: its name and the address it
// reaches master (host:port) from ("" when it has neither).
func nodeAddr(master string) string {
	name, _ := os.Hostname()
	c, err := net.Dial("udp", master) // picks the route's source address; sends nothing
	if err != nil {
		return name
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP.String()
	if name == "" {
		return ip
	}
	return name + " (" + ip + ")"
}
