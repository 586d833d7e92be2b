package tcp

import (
	"container/list"
	"net"
)

// maxPendingHandshakes bounds the connections a listening rank holds
// before they prove the secret, in each of two stages: those that have not
// yet sent a well-formed hello, and those that have and owe the proof. A
// connection arriving at a full stage evicts one (never the newcomer),
// chosen for fairness between hosts (stage.evict), so that strangers
// holding connections open cannot crowd out a rank: a real rank's
// connection only needs to outlive one round trip in each stage.
// Config.HandshakeTimeout bounds each connection's time anyway.
const maxPendingHandshakes = 64

// stage is one stage of the connections waiting to authenticate, grouped
// by the host (IP address) they come from, each host's oldest first.
//
// Eviction is per-host fair: a full stage evicts the oldest connection of
// the host that holds the most connections in it (of those, the host whose
// oldest is oldest). A host holding no more than its share of the stage
// (its count below the largest) loses nothing, so a flood from one address
// only ever evicts its own connections while another host's handshakes,
// however slow, wait their turn; a flood from many addresses still leaves
// each address its share.
type stage struct {
	n     int
	hosts map[string]*list.List // of *pending
}

// pending is an accepted connection until it proves the secret.
type pending struct {
	nc      *net.TCPConn
	host    string
	seq     uint64 // arrival order
	on      *stage // the stage it waits in; nil once authenticated or dropped
	el      *list.Element
	dropped bool // closed to make room for a newer connection
}

// remove takes pc off its stage.
func (pc *pending) remove() {
	st := pc.on
	if st == nil {
		return
	}
	l := st.hosts[pc.host]
	l.Remove(pc.el)
	if l.Len() == 0 {
		delete(st.hosts, pc.host)
	}
	st.n--
	pc.on, pc.el = nil, nil
}

// enter moves pc to st, evicting one connection if st is then full.
func (st *stage) enter(pc *pending) {
	pc.remove()
	if st.hosts == nil {
		st.hosts = make(map[string]*list.List)
	}
	l := st.hosts[pc.host]
	if l == nil {
		l = list.New()
		st.hosts[pc.host] = l
	}
	pc.on, pc.el = st, l.PushBack(pc)
	st.n++
	if st.n > maxPendingHandshakes {
		st.evict()
	}
}

// evict drops the oldest connection of the host holding the most (ties:
// the host whose oldest arrived first); the newcomer, just entered, is
// never the one while the stage holds more than one connection.
func (st *stage) evict() {
	var victim *pending
	most := 0
	for _, l := range st.hosts {
		front := l.Front().Value.(*pending)
		if l.Len() > most || (l.Len() == most && front.seq < victim.seq) {
			victim, most = front, l.Len()
		}
	}
	victim.remove()
	victim.dropped = true
	_ = victim.nc.Close() // its handshake fails and reports the drop
}

// pend registers an accepted connection in the first stage, evicting one
// if it is full; false once the mesh stopped.
func (m *mesh) pend(nc *net.TCPConn) (*pending, bool) {
	m.Lock()
	defer m.Unlock()
	if !m.TrackLocked(nc) {
		return nil, false
	}
	m.arrivals++
	pc := &pending{nc: nc, host: hostOf(nc.RemoteAddr()), seq: m.arrivals}
	m.quiet.enter(pc)
	return pc, true
}

// hostOf is the host part of addr.
func hostOf(addr net.Addr) string {
	if ta, ok := addr.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host := addr.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return host
}

// spoke moves pc to the second stage (a well-formed hello arrived).
func (m *mesh) spoke(pc *pending) {
	m.Lock()
	defer m.Unlock()
	if pc.on == &m.quiet {
		m.spoken.enter(pc)
	}
}

// authenticated takes pc off the stages, where it could be dropped; false
// if it was dropped already.
func (m *mesh) authenticated(pc *pending) bool {
	m.Lock()
	defer m.Unlock()
	if pc.dropped {
		return false
	}
	pc.remove()
	return true
}

// finish forgets pc; it reports whether pc was dropped and whether the
// mesh has stopped (its connections closed by stop are not turned away).
func (m *mesh) finish(pc *pending) (dropped, stopped bool) {
	m.Lock()
	defer m.Unlock()
	pc.remove()
	m.UntrackLocked(pc.nc)
	return pc.dropped, m.StoppedLocked()
}
