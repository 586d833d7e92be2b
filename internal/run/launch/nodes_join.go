package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// Joining: how node 0's launcher waits for the others before the first
// attempt, so that every misconfiguration ends on every node within
// seconds with an error naming it, and the waiting side says as it goes
// what it waits for.
//
//  1. Node 0 hosts the launchers' store at -master (host0). When -master's
//     host is a loopback address (and the job has a secret) it listens on
//     every interface instead, as PyTorch's TCPStore does, so that a node
//     that dials node 0's real address reaches it and is told what is
//     wrong (step 3). When the port is taken, node 0 asks whoever holds it
//     (whoHolds): another launcher of this job leading it already (two
//     nodes given -node-rank 0: that one is told too, and ends), a store
//     of another secret, or another program.
//  2. Node 0 announces itself (the leader key: a random id, its host and
//     pid). When -master's host is not an address of this host, it keeps
//     asking -master who leads there (probeLeader): a launcher other than
//     itself means two nodes were given -node-rank 0, and both end.
//  3. Node 0 reads every node's join report as it comes (awaitNodes) and
//     ends the job at once, publishing why, when one disagrees: another
//     -ranks or -nnodes, or a -master that is not a loopback address where
//     that node resolves it while node 0's is one where node 0 does (its
//     ranks would publish addresses the others cannot reach). It prints each node that joins, each connection its
//     store turns away (where from, why) as it happens, and every
//     Config.joinReport (15 s) whom it still waits for. A connection that
//     failed authentication (a wrong secret) while nodes are missing ends
//     the wait Config.rejectedGrace (10 s) later, naming the host it came
//     from; otherwise the wait ends after Elastic.JoinTimeout.
//  4. The other nodes dial -master (dialLeader), saying every joinReport
//     why they still wait (connection refused: node 0 is not up yet, or
//     does not listen on that address); a store that refuses the secret
//     or does not speak the protocol is an error at once, and so is a
//     port that accepts connections but completes no handshake for 10 s
//     (another program holds it).
//  5. With -nnodes MIN:MAX and a last call, node 0 then waits for nodes
//     MIN..MAX-1 too (lastCall, nodes_lastcall.go).

// Defaults of Config's join timings.
const (
	defaultJoinReport    = 15 * time.Second
	defaultRejectedGrace = 10 * time.Second
)

// Keys of the join, besides attempt 0's reports and plan.
const (
	keyLeader    = "elastic/leader"    // node 0's leaderInfo
	keyDuplicate = "elastic/node0-dup" // a second launcher given -node-rank 0 (its leaderInfo)
)

// leaderInfo names a launcher that hosts, or tried to host, the rendezvous.
type leaderInfo struct {
	ID   string `json:"id"`
	Host string `json:"host"`
	Pid  int    `json:"pid"`
}

func (l leaderInfo) String() string {
	return fmt.Sprintf("the launcher of pid %d on host %s", l.Pid, l.Host)
}

func newLeaderInfo() (leaderInfo, error) {
	id, err := randomHex(16)
	host, _ := os.Hostname()
	return leaderInfo{ID: id, Host: host, Pid: os.Getpid()}, err
}

// loopbackHost reports whether host names only loopback addresses.
func loopbackHost(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	if host == "localhost" {
		return true
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// host0 hosts the launchers' store at -master (node 0) and announces this
// launcher as the job's leader.
func (r *nodeRdzv) host0(ctx context.Context, scfg rendezvous.StoreConfig) error {
	ln, remote, err := r.listenMaster()
	if err != nil {
		return fmt.Errorf("launch: node 0: hosting the launchers' rendezvous at %s: %w%s", r.cfg.Master, err, r.whoHolds(ctx, scfg, err))
	}
	r.masterRemote = remote
	if r.store, err = rendezvous.ConnectListener(ctx, rendezvous.Env{Rank: 0, WorldSize: r.cfg.Nnodes}, ln, scfg); err != nil {
		return fmt.Errorf("launch: node 0: hosting the launchers' rendezvous at %s: %w", r.cfg.Master, err)
	}
	if r.leader, err = newLeaderInfo(); err == nil {
		err = r.setSealed(ctx, keyLeader, r.leader)
	}
	if err != nil {
		r.store.Close()
		return fmt.Errorf("launch: node 0: announcing this launcher: %w", err)
	}
	return nil
}

// listenMaster listens on -master, on every interface when its host is a
// loopback address (step 1) or not one of this host's (remote).
func (r *nodeRdzv) listenMaster() (ln net.Listener, remote bool, err error) {
	port := strconv.Itoa(r.port)
	if !r.cfg.Insecure && loopbackHost(r.host) {
		ln, err = net.Listen("tcp", net.JoinHostPort("", port))
		return ln, false, err
	}
	ln, err = net.Listen("tcp", net.JoinHostPort(r.host, port))
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		ln, err = net.Listen("tcp", net.JoinHostPort("", port))
		return ln, true, err
	}
	return ln, false, err
}

// whoHolds words who holds -master's port when node 0 cannot listen there
// (err), and tells a launcher leading this job there that a second node
// 0 came.
func (r *nodeRdzv) whoHolds(ctx context.Context, scfg rendezvous.StoreConfig, err error) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ""
	}
	c, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, derr := rendezvous.DialStore(c, r.cfg.Master, scfg)
	switch {
	case derr == nil:
		defer st.Close()
		r.store = st
		defer func() { r.store = nil }()
		var l leaderInfo
		if r.getSealed(c, keyLeader, &l) == nil {
			me, _ := newLeaderInfo()
			_ = r.setSealed(c, keyDuplicate, me)
			return fmt.Sprintf(": %s already leads this job there as node 0: were two launchers given -node-rank 0? (it is told and ends too)", l)
		}
		return ": a store that knows this job's secret listens there (another job run with the same RINGDDP_SECRET?)"
	case errors.Is(derr, rendezvous.ErrAuth):
		return ": a ringddp store of another secret listens there (another job's launcher or rank 0?); pick another -master port, the same on every node"
	default:
		return ": another program holds the port; pick a free -master port, the same on every node"
	}
}

// setSealed stores v as JSON, sealed, at key.
func (r *nodeRdzv) setSealed(ctx context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.store.Set(ctx, key, r.seal.seal(key, b))
}

// getSealed waits for key, checks its seal and decodes it into v.
func (r *nodeRdzv) getSealed(ctx context.Context, key string, v any) error {
	b, err := r.store.Get(ctx, key)
	if err == nil {
		err = r.seal.decode(key, b, v)
	}
	return err
}

// join waits for every node's launcher to join before the first attempt
// and returns that attempt's plan; an error has been published to the
// nodes that joined. The plan carries the job's run id, which every node's
// ranks get as RINGDDP_RUN_ID: node 0's RINGDDP_RUN_ID, else a fresh one,
// "nodes-" and 16 random hex digits, so that two jobs never share one.
func (r *nodeRdzv) join(ctx context.Context, sigs chan os.Signal) (nodePlan, error) {
	cfg, e := r.cfg, r.e
	baseID := cfg.Getenv(EnvRunID)
	if baseID == "" {
		id, err := randomHex(8)
		if err != nil {
			return nodePlan{}, fmt.Errorf("launch: making the run id: %w", err)
		}
		baseID = "nodes-" + id
	}
	members := make([]int, cfg.Nnodes)
	for i := range members {
		members[i] = i
	}
	if len(members) > 1 {
		fmt.Fprintf(r.w.errOut, "launch: node 0: waiting for the launchers of %s at %s (at most %v)\n", listText("node", members[1:]), cfg.Master, e.JoinTimeout)
	}
	sctx, stopSig := signalContext(ctx, sigs)
	reps, err := r.awaitNodes(sctx, members[1:], time.Now().Add(e.JoinTimeout))
	var left []DroppedNode
	if err == nil { // the last call's nodes (nodes_lastcall.go)
		var more []int
		more, left, err = r.lastCall(sctx, reps)
		members = append(members, more...)
	}
	plan := nodePlan{Attempt: 0, RunID: baseID, Members: members, RanksPerNode: cfg.Ranks, Dropped: left}
	r.addrs = map[int]string{}
	for node, rep := range reps {
		r.addrs[node] = rep.Addr
	}
	if serr := stopSig(); serr != nil {
		return plan, r.finish(ctx, plan, r.windowReaders(ctx, reps), fmt.Errorf("launch: node 0: %w while waiting for the other nodes", serr))
	}
	if err != nil {
		return plan, r.finish(ctx, plan, r.windowReaders(ctx, reps), err)
	}
	return plan, nil
}

// arrival is what awaitNodes hears from a helper goroutine: a node's
// join report (or why it could not be read), or a second node 0.
type arrival struct {
	node int
	rep  nodeReport
	err  error
	dup  *leaderInfo
}

// awaitNodes waits until deadline for the join reports of the nodes want
// (steps 2 and 3 above) and returns those that came, with an error when
// the job cannot start.
func (r *nodeRdzv) awaitNodes(ctx context.Context, want []int, deadline time.Time) (map[int]nodeReport, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	ch := make(chan arrival, len(want)+2)
	for _, node := range want {
		go func() {
			rep, err := r.readReport(ctx, 0, node)
			ch <- arrival{node: node, rep: rep, err: err}
		}()
	}
	go r.watchDuplicate(ctx, ch)
	if r.masterRemote {
		go r.probeLeader(ctx, ch)
	}
	got := map[int]nodeReport{}
	w := &joinWatch{r: r, start: time.Now()}
	tick := time.NewTicker(min(time.Second, r.cfg.joinReport))
	defer tick.Stop()
	for len(got) < len(want) {
		select {
		case a := <-ch:
			if err := r.arrived(a, got, len(want)); err != nil {
				return got, err
			}
		case now := <-tick.C:
			if err := w.tick(now, want, got); err != nil {
				return got, err
			}
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Now().Before(deadline) {
				return got, ctx.Err()
			}
			return got, fmt.Errorf("launch: node 0: %s did not join within %v (-master %s)%s",
				listText("node", w.missing(want, got)), r.e.JoinTimeout, r.cfg.Master, w.turnedSuffix())
		}
	}
	return got, nil
}

// arrived takes one arrival; an error ends the join.
func (r *nodeRdzv) arrived(a arrival, got map[int]nodeReport, want int) error {
	switch {
	case a.dup != nil:
		return fmt.Errorf("launch: node 0: %s also runs as node 0 of this job at -master %s: were two launchers given -node-rank 0? (give each node its own -node-rank, 0..%d)",
			a.dup, r.cfg.Master, r.cfg.mostNodes()-1)
	case a.err != nil && errors.Is(a.err, rendezvous.ErrTimeout):
		return nil // the deadline: awaitNodes reports
	case a.err != nil:
		return fmt.Errorf("launch: node 0: %w", a.err)
	}
	got[a.node] = a.rep // a reader of the plan, whatever it says
	if why := r.disagreement(a.node, a.rep); why != "" {
		return errors.New("launch: node 0: " + why)
	}
	fmt.Fprintf(r.w.errOut, "launch: node 0: node %d joined (%d of %d)\n", a.node, len(got), want)
	return nil
}

// disagreement is why node's join report rep disagrees with node 0
// (step 3 above); "" when it does not.
func (r *nodeRdzv) disagreement(node int, rep nodeReport) string {
	cfg := r.cfg
	switch {
	case rep.Ranks != cfg.Ranks:
		return fmt.Sprintf("every node must run as many ranks (-ranks) as node 0's %d: node %d has -ranks %d", cfg.Ranks, node, rep.Ranks)
	case rep.Nnodes != 0 && (rep.Nnodes != cfg.Nnodes || max(rep.MaxNodes, rep.Nnodes) != cfg.mostNodes()):
		return fmt.Sprintf("every node must be given the same -nnodes as node 0's %s: node %d has -nnodes %s",
			nodesWords(cfg.Nnodes, cfg.MaxNodes), node, nodesWords(rep.Nnodes, rep.MaxNodes))
	case rep.Master != "" && !rep.MasterLoopback && loopbackHost(r.host):
		return fmt.Sprintf("node %d dials node 0 at -master %s, but node 0 was given -master %s, a loopback address here: "+
			"node 0's ranks would publish addresses the other hosts cannot reach; give every node the same -master, an address of node 0 they can reach "+
			"(a host name that node 0 resolves to 127.0.x.x, as /etc/hosts often does, counts as loopback)",
			node, rep.Master, cfg.Master)
	}
	return ""
}

// joinWatch is what node 0 reports while it waits: the connections its
// store turned away, and whom it waits for.
type joinWatch struct {
	r          *nodeRdzv
	start      time.Time
	turned     rendezvous.TurnedAway
	rejectedAt time.Time // the first failed authentication seen
	lastReport time.Time
}

// tick reports what changed; an error ends the join (a failed
// authentication while nodes are still missing, rejectedGrace ago).
func (w *joinWatch) tick(now time.Time, want []int, got map[int]nodeReport) error {
	r := w.r
	if srv := r.store.Server(); srv != nil {
		t := srv.TurnedAway()
		if t.Total() > w.turned.Total() {
			fmt.Fprintf(r.w.errOut, "launch: node 0: the launchers' rendezvous at %s turned away %s; so far %s%s\n",
				r.cfg.Master, Count(int(t.Total()-w.turned.Total()), "more connection"), strings.TrimPrefix(t.String(), "the store turned away "), rejectedHint(t))
		}
		if t.Rejected > 0 && w.rejectedAt.IsZero() {
			w.rejectedAt = now
		}
		w.turned = t
	}
	missing := w.missing(want, got)
	if !w.rejectedAt.IsZero() && now.Sub(w.rejectedAt) >= r.cfg.rejectedGrace {
		return fmt.Errorf("launch: node 0: %s did not join, and %s%s", listText("node", missing), w.turned, rejectedHint(w.turned))
	}
	last := w.lastReport
	if last.IsZero() {
		last = w.start
	}
	if now.Sub(last) >= r.cfg.joinReport {
		w.lastReport = now
		fmt.Fprintf(r.w.errOut, "launch: node 0: still waiting for %s at %s (%v of at most %v)%s\n",
			listText("node", missing), r.cfg.Master, now.Sub(w.start).Round(time.Second), r.e.JoinTimeout, w.turnedSuffix())
	}
	return nil
}

// rejectedHint explains failed authentications.
func rejectedHint(t rendezvous.TurnedAway) string {
	if t.Rejected == 0 {
		return ""
	}
	return " (a failed authentication: a launcher given another RINGDDP_SECRET? every node needs the same)"
}

func (w *joinWatch) turnedSuffix() string {
	if w.turned.Total() == 0 {
		return ""
	}
	return "; " + w.turned.String()
}

func (w *joinWatch) missing(want []int, got map[int]nodeReport) []int {
	var m []int
	for _, n := range want {
		if _, ok := got[n]; !ok {
			m = append(m, n)
		}
	}
	return m
}

// watchDuplicate sends an arrival when a second launcher given -node-rank
// 0 says so (whoHolds, probeLeader).
func (r *nodeRdzv) watchDuplicate(ctx context.Context, ch chan<- arrival) {
	for ctx.Err() == nil {
		var l leaderInfo
		err := r.getSealed(ctx, keyDuplicate, &l)
		if err == nil {
			ch <- arrival{dup: &l}
			return
		}
		if ctx.Err() == nil && !errors.Is(err, rendezvous.ErrTimeout) {
			fmt.Fprintf(r.w.errOut, "launch: node 0: ignoring %s: %v\n", keyDuplicate, err)
			return
		}
	}
}

// probeLeader asks -master, every second until ctx ends, which launcher
// leads the job there; one other than this launcher is a second node 0,
// told and reported on ch. It stops when it finds this launcher (-master
// reaches it through an address it does not hold).
func (r *nodeRdzv) probeLeader(ctx context.Context, ch chan<- arrival) {
	scfg := rendezvous.StoreConfig{Secret: r.storeSecret(), Insecure: r.cfg.Insecure, Timeout: 2 * time.Second}
	for {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := rendezvous.DialStore(c, r.cfg.Master, scfg)
		if err == nil {
			other := &nodeRdzv{store: st, seal: r.seal}
			var l leaderInfo
			if other.getSealed(c, keyLeader, &l) == nil {
				if l.ID == r.leader.ID {
					cancel()
					st.Close()
					return
				}
				_ = other.setSealed(c, keyDuplicate, r.leader)
				cancel()
				st.Close()
				ch <- arrival{dup: &l}
				return
			}
			st.Close()
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// storeSecret is the job's secret, which authenticates the launchers'
// store.
func (r *nodeRdzv) storeSecret() []byte { return []byte(r.cfg.Getenv(EnvSecret)) }
