package launch

import (
	"fmt"
	"path/filepath"
	"unicode/utf8"

	"github.com/ringddp/ringddp/internal/untrusted"
)

// Checking what the launchers read from their rendezvous. A value that
// does not check (nodes_seal.go) or a field out of range is an error
// naming the field and never reaches a rank's command line, a channel's
// size or a terminal: every text another launcher wrote is printed through
// untrusted.Text.

// Bounds of the values the launchers exchange.
const (
	maxRunIDLen   = 128      // run_id, in bytes
	maxPathLen    = 4096     // from, in bytes
	maxReasonLen  = 4096     // a failure's reason, a signal's name, a fatal error
	maxErrLen     = 64 << 10 // a last plan's err
	maxNotes      = 256      // notes
	maxShownText  = 2000     // the runes of another launcher's text a message quotes
	maxNodeRanks  = 1 << 16  // ranks a node may report (-ranks)
	maxStopSeqRun = 1 << 20  // stop-seq values a report may carry
	minStorePort  = 1024     // the lowest store_port: node 0 binds a port the kernel picks
)

// printable reports whether s is valid UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// checkPlan checks node 0's plan for attempt n as the launcher of a job
// of nnodes nodes (at the start) with ranks ranks each reads it, and
// makes its texts printable.
func checkPlan(p *nodePlan, n, nnodes, ranks int) error {
	switch {
	case p.Attempt != n:
		return fmt.Errorf("attempt %d: want %d (the attempt this node waits for)", p.Attempt, n)
	case len(p.Err) > maxErrLen:
		return fmt.Errorf("err: %d bytes, more than %d", len(p.Err), maxErrLen)
	case p.Done && p.Err != "":
		return fmt.Errorf("done and err both set")
	}
	p.Err = untrusted.Text(p.Err, maxShownText)
	if p.Done || p.Err != "" {
		return nil // a last plan: nothing else is read
	}
	if err := checkMembers(p.Members, nnodes); err != nil {
		return err
	}
	switch {
	case p.RanksPerNode != ranks:
		return fmt.Errorf("ranks_per_node %d: want this node's -ranks %d", p.RanksPerNode, ranks)
	case p.StorePort < minStorePort || p.StorePort > 65535:
		return fmt.Errorf("store_port %d: want %d..65535 (node 0 binds a free unprivileged port)", p.StorePort, minStorePort)
	case p.RunID == "" || len(p.RunID) > maxRunIDLen || !printable(p.RunID):
		return fmt.Errorf("run_id %q: want 1..%d printable bytes", untrusted.Text(p.RunID, 80), maxRunIDLen)
	case len(p.JobID) > maxRunIDLen || !printable(p.JobID):
		return fmt.Errorf("job_id %q: want at most %d printable bytes", untrusted.Text(p.JobID, 80), maxRunIDLen)
	case p.Step < 0:
		return fmt.Errorf("step %d: must not be negative", p.Step)
	case len(p.From) > maxPathLen || !printable(p.From):
		return fmt.Errorf("from %q: want at most %d printable bytes", untrusted.Text(p.From, 80), maxPathLen)
	case p.From != "" && (filepath.Base(p.From) == "." || filepath.Base(p.From) == ".." || filepath.Base(p.From) == string(filepath.Separator)):
		return fmt.Errorf("from %q: names no file", untrusted.Text(p.From, 80))
	case len(p.Notes) > maxNotes:
		return fmt.Errorf("notes: %d of them, more than %d", len(p.Notes), maxNotes)
	case len(p.Dropped) > nnodes:
		return fmt.Errorf("dropped: %d nodes of a job of %d", len(p.Dropped), nnodes)
	}
	for i := range p.Notes {
		p.Notes[i] = untrusted.Text(p.Notes[i], maxShownText)
	}
	for i, d := range p.Dropped {
		if d.Node < 1 || d.Node >= nnodes {
			return fmt.Errorf("dropped[%d]: node %d: want 1..%d", i, d.Node, nnodes-1)
		}
		p.Dropped[i].Reason = untrusted.Text(d.Reason, maxShownText)
	}
	if f := p.Failure; f != nil {
		switch {
		case f.Node < 0 || f.Node >= nnodes:
			return fmt.Errorf("failure.node %d: want 0..%d", f.Node, nnodes-1)
		case f.Rank < -1 || f.Rank >= nnodes*ranks+maxJoiners: // a joining rank's name included
			return fmt.Errorf("failure.rank %d: want -1..%d", f.Rank, nnodes*ranks+maxJoiners-1)
		case f.Pid < 0:
			return fmt.Errorf("failure.pid %d: must not be negative", f.Pid)
		case f.Step < -1:
			return fmt.Errorf("failure.step %d: want -1 or more", f.Step)
		}
		f.Reason = untrusted.Text(f.Reason, maxShownText)
	}
	return nil
}

// checkMembers checks a plan's members: 1..nnodes distinct nodes of
// 0..nnodes-1, node 0 first.
func checkMembers(members []int, nnodes int) error {
	if len(members) < 1 || len(members) > nnodes {
		return fmt.Errorf("members: %d nodes, want 1..%d", len(members), nnodes)
	}
	if members[0] != 0 {
		return fmt.Errorf("members: %s: node 0 must come first", intsText(members))
	}
	seen := make([]bool, nnodes)
	for _, m := range members {
		switch {
		case m < 0 || m >= nnodes:
			return fmt.Errorf("members: node %d out of range 0..%d", m, nnodes-1)
		case seen[m]:
			return fmt.Errorf("members: node %d appears twice", m)
		}
		seen[m] = true
	}
	return nil
}

// checkReport checks node's report for a rendezvous, which should be
// about attempt attempt (-1: joining), and makes its texts printable.
func checkReport(rep *nodeReport, node, attempt int) error {
	switch {
	case rep.Node != node:
		return fmt.Errorf("node %d: want %d (the key it was read at)", rep.Node, node)
	case rep.Attempt != attempt:
		return fmt.Errorf("attempt %d: want %d", rep.Attempt, attempt)
	case rep.Ranks < 1 || rep.Ranks > maxNodeRanks:
		return fmt.Errorf("ranks %d: want 1..%d", rep.Ranks, maxNodeRanks)
	case len(rep.Signal) > maxReasonLen || len(rep.Fatal) > maxReasonLen || len(rep.Master) > maxPathLen:
		return fmt.Errorf("signal, fatal or master longer than %d bytes", maxReasonLen)
	case len(rep.Addr) > maxAddrLen:
		return fmt.Errorf("addr: %d bytes, more than %d", len(rep.Addr), maxAddrLen)
	}
	rep.Addr = untrusted.Text(rep.Addr, maxAddrLen)
	rep.Signal = untrusted.Text(rep.Signal, maxShownText)
	rep.Fatal = untrusted.Text(rep.Fatal, maxShownText)
	rep.Master = untrusted.Text(rep.Master, maxShownText)
	if f := rep.Fail; f != nil {
		switch {
		case f.Rank < -1 || f.Pid < 0:
			return fmt.Errorf("fail: rank %d, pid %d: out of range", f.Rank, f.Pid)
		case f.Seq < 0 || f.Seq > maxStopSeqRun:
			return fmt.Errorf("fail.seq %d: want 0..%d", f.Seq, maxStopSeqRun)
		case len(f.Reason) > maxReasonLen:
			return fmt.Errorf("fail.reason: %d bytes, more than %d", len(f.Reason), maxReasonLen)
		}
		f.Reason = untrusted.Text(f.Reason, maxShownText)
	}
	return nil
}

// checkStop checks a stop request of a job of nnodes nodes and makes its
// reason printable.
func checkStop(m *stopMsg, nnodes int) error {
	switch {
	case m.Node < 0 || m.Node >= nnodes:
		return fmt.Errorf("node %d: want 0..%d", m.Node, nnodes-1)
	case m.Rank < -1 || m.Pid < 0:
		return fmt.Errorf("rank %d, pid %d: out of range", m.Rank, m.Pid)
	case len(m.Reason) > maxReasonLen:
		return fmt.Errorf("reason: %d bytes, more than %d", len(m.Reason), maxReasonLen)
	}
	m.Reason = untrusted.Text(m.Reason, maxShownText)
	return nil
}
