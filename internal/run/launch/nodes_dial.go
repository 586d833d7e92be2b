package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// dialLeader joins node 0's launcher at -master (a node other than 0; step
// 4 of nodes_join.go): it dials until Elastic.JoinTimeout, saying every
// Config.joinReport why it still waits, and fails at once on a store that
// refuses the secret or does not speak the protocol, or on a port that
// accepts connections but completes no handshake for two dialRounds.
// It then claims its -node-rank, which no other launcher may hold.
func (r *nodeRdzv) dialLeader(ctx context.Context, scfg rendezvous.StoreConfig) error {
	master := r.cfg.Master
	start := time.Now()
	deadline := start.Add(r.e.JoinTimeout)
	round := min(dialRound, r.cfg.joinReport)
	lastReport := start
	for {
		end := time.Now().Add(round)
		if end.After(deadline) {
			end = deadline
		}
		c, cancel := context.WithDeadline(ctx, end)
		st, err := rendezvous.DialStore(c, master, scfg)
		cancel()
		switch {
		case err == nil:
			r.store = st
			return r.claimNode(ctx)
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, rendezvous.ErrAuth):
			return fmt.Errorf("launch: node %d: joining node 0's launcher at %s: %w (every node needs the same RINGDDP_SECRET)", r.node, master, err)
		case !errors.Is(err, rendezvous.ErrTimeout):
			return fmt.Errorf("launch: node %d: joining node 0's launcher at %s: %w (is -master node 0's launcher, the same address and port on every node?)", r.node, master, err)
		case !time.Now().Before(deadline):
			return fmt.Errorf("launch: node %d: node 0's launcher did not answer at %s within %v: %w", r.node, master, r.e.JoinTimeout, err)
		}
		if portOpen(master) {
			// Accepting, but no handshake completed for a whole round:
			// one last try, for a node 0 that has only just come up.
			c, cancel := context.WithTimeout(ctx, round)
			st, err2 := rendezvous.DialStore(c, master, scfg)
			cancel()
			if err2 == nil {
				r.store = st
				return r.claimNode(ctx)
			}
			return fmt.Errorf("launch: node %d: something at %s accepts connections but has not answered as node 0's launcher for %v: "+
				"is the port taken by another program on node 0? (%w)", r.node, master, time.Since(start).Round(time.Second), err)
		}
		if now := time.Now(); now.Sub(lastReport) >= r.cfg.joinReport {
			lastReport = now
			fmt.Fprintf(r.w.errOut, "launch: node %d: still waiting for node 0's launcher at %s (%v of at most %v): %v\n",
				r.node, master, now.Sub(start).Round(time.Second), r.e.JoinTimeout, err)
		}
	}
}

// dialRound is how long dialLeader dials before it looks at why it has
// not reached node 0 yet.
const dialRound = 5 * time.Second

// portOpen reports whether a TCP connection to addr is accepted.
func portOpen(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// claimKey counts the launchers that claimed node.
func claimKey(node int) string { return "elastic/claim/" + strconv.Itoa(node) }

// claimNode takes this node's -node-rank in the job: the first launcher
// to claim it holds it; a second (two hosts given the same -node-rank)
// fails.
func (r *nodeRdzv) claimNode(ctx context.Context) error {
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := r.store.Add(c, claimKey(r.node), 1)
	if err != nil {
		r.store.Close()
		return fmt.Errorf("launch: node %d: joining node 0's launcher at %s: %w", r.node, r.cfg.Master, err)
	}
	if r.node >= r.cfg.Nnodes { // a new node: node 0 decides (nodes_scaleup.go)
		r.rj.rejoin, r.rj.grow, r.rj.fresh = true, true, n == 1
		return nil
	}
	if n != 1 && r.e.Heal && r.takesBack(ctx) {
		r.rj.rejoin = true // node 0 decides (nodes_rejoin.go)
		return nil
	}
	if n != 1 {
		if why := r.goneRefusal(ctx); why != "" {
			r.store.Close()
			return errors.New(why)
		}
		r.store.Close()
		return fmt.Errorf("launch: node %d: another launcher joined the job as node %d already: were two launchers given -node-rank %d? (give each node its own, 0..%d)",
			r.node, r.node, r.node, r.cfg.mostNodes()-1)
	}
	fmt.Fprintf(r.w.errOut, "launch: node %d: joined node 0's launcher at %s\n", r.node, r.cfg.Master)
	return nil
}
