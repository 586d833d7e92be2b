package tcp

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
)

// The listening rank's record of connections turned away: the latest few,
// and counts by host for a few hosts.
const (
	maxRecentTurnedAway = 6
	maxTurnedAwayHosts  = 6
	maxRefusalNotes     = 8
)

// Why a listening rank turned a connection away.
const (
	awayDropped  = iota // the oldest of too many waiting to authenticate
	awayTimedOut        // no proof within Config.HandshakeTimeout
	awayBadProof        // a wrong proof of the secret
	awayRefused         // another protocol version or security mode
	awayGarbage         // not the protocol, or hung up before proving anything
	awayKinds
)

func awayName(kind int) string {
	switch kind {
	case awayDropped:
		return "dropped"
	case awayTimedOut:
		return "timed out"
	case awayBadProof:
		return "failed the proof"
	case awayRefused:
		return "refused"
	}
	return "not the protocol or hung up"
}

// turnedAway counts the connections a listening rank turned away before
// they authenticated, by kind and by host, and keeps the latest few and
// the first refusals with their reasons, for the error if the mesh does
// not form in time. Its memory is bounded whatever strangers do.
type turnedAway struct {
	total      int
	kinds      [awayKinds]int
	hosts      map[string]int // at most maxTurnedAwayHosts
	otherHosts int            // connections from further hosts
	recent     [maxRecentTurnedAway]string
	next       int // where the next recent entry goes
	notes      []string
}

func (a *turnedAway) add(addr net.Addr, kind int, note string) {
	a.total++
	a.kinds[kind]++
	host := hostOf(addr)
	if _, ok := a.hosts[host]; ok || len(a.hosts) < maxTurnedAwayHosts {
		a.hosts[host]++
	} else {
		a.otherHosts++
	}
	a.recent[a.next%maxRecentTurnedAway] = fmt.Sprintf("%v %s", addr, awayName(kind))
	a.next++
	if note != "" && len(a.notes) < maxRefusalNotes {
		a.notes = append(a.notes, note)
	}
}

// String describes what was turned away ("" if nothing), as in
// "turned away 812 connection(s) before they authenticated (800 dropped as
// the oldest of 64 waiting, 12 timed out after 2s) from 127.0.0.1 (812);
// latest: ...; refused: ...".
func (a *turnedAway) String(timeout time.Duration) string {
	if a.total == 0 {
		return ""
	}
	var kinds []string
	for k, n := range a.kinds {
		if n == 0 {
			continue
		}
		switch k {
		case awayDropped:
			kinds = append(kinds, fmt.Sprintf("%d dropped to make room (over %d waiting; the busiest host's oldest first)", n, maxPendingHandshakes))
		case awayTimedOut:
			kinds = append(kinds, fmt.Sprintf("%d timed out after %v", n, timeout))
		default:
			kinds = append(kinds, fmt.Sprintf("%d %s", n, awayName(k)))
		}
	}
	hosts := make([]string, 0, len(a.hosts))
	for h := range a.hosts {
		hosts = append(hosts, h)
	}
	slices.SortFunc(hosts, func(x, y string) int { return a.hosts[y] - a.hosts[x] })
	for i, h := range hosts {
		hosts[i] = fmt.Sprintf("%s (%d)", h, a.hosts[h])
	}
	if a.otherHosts > 0 {
		hosts = append(hosts, fmt.Sprintf("other hosts (%d)", a.otherHosts))
	}
	var recent []string
	for i := max(0, a.next-maxRecentTurnedAway); i < a.next; i++ {
		recent = append(recent, a.recent[i%maxRecentTurnedAway])
	}
	s := fmt.Sprintf("turned away %d connection(s) before they authenticated (%s) from %s; latest: %s",
		a.total, strings.Join(kinds, ", "), strings.Join(hosts, ", "), strings.Join(recent, ", "))
	if len(a.notes) > 0 {
		s += "; refused: " + strings.Join(a.notes, "; ")
	}
	return s
}

// turnAway records, and reports at once (rate-limited, mpconn.Reporter),
// a connection from addr turned away before it authenticated: dropped
// (evicted from a full stage), or failed with res and err.
func (m *mesh) turnAway(addr net.Addr, dropped bool, res acceptResult, err error) {
	kind := awayGarbage
	var ne net.Error
	switch {
	case dropped:
		kind = awayDropped
	case errors.As(err, &ne) && ne.Timeout():
		kind = awayTimedOut
	case res.out == acceptNote && res.badProof:
		kind = awayBadProof
	case res.out == acceptNote:
		kind = awayRefused
	}
	claim := ""
	if res.from >= 0 {
		claim = fmt.Sprintf(" (claiming rank %d)", res.from)
	}
	var note, why string
	switch kind {
	case awayBadProof:
		note = fmt.Sprintf("%v%s: %v", addr, claim, err)
		why = "authentication failed (wrong secret?)" + claim
	case awayRefused:
		note = fmt.Sprintf("%v%s: %v", addr, claim, err)
		why = fmt.Sprintf("%v%s", err, claim)
	case awayDropped:
		why = fmt.Sprintf("dropped to make room: more than %d connections from its host waited to authenticate (a flood?)", maxPendingHandshakes)
	case awayTimedOut:
		why = fmt.Sprintf("did not authenticate within %v (HandshakeTimeout)", m.c.cfg.HandshakeTimeout)
	default:
		why = "not the ringddp protocol, or hung up before proving the secret"
	}
	m.Lock()
	m.away.add(addr, kind, note)
	m.Unlock()
	m.rep.TurnedAway(addr.String(), hostOf(addr), why)
}

// setDialing records what this rank knows of lower rank q, for progress.
func (m *mesh) setDialing(q int, status string) {
	m.Lock()
	m.dialing[q] = status
	m.Unlock()
}

// progress reports whom the mesh still waits for. It runs on the
// goroutine that adds links.
func (m *mesh) progress() {
	m.rep.Waiting(mpconn.Missing(m.c.core.Links, m.c.rank), m.waitingFor(true))
}

// waitingFor describes the ranks the mesh still waits for: the lower ones
// with what dialing them has given so far, the higher ones as not
// connected (with the count of connections turned away, if counted). It
// runs on the goroutine that adds links.
func (m *mesh) waitingFor(counted bool) string {
	var parts, above []string
	m.Lock()
	for q, l := range m.c.core.Links {
		switch {
		case l != nil || q == m.c.rank:
		case q < m.c.rank && m.dialing[q] == "":
			parts = append(parts, fmt.Sprintf("rank %d has not published its address yet", q))
		case q < m.c.rank:
			parts = append(parts, fmt.Sprintf("rank %d %s", q, m.dialing[q]))
		default:
			above = append(above, strconv.Itoa(q))
		}
	}
	turned := m.away.total
	m.Unlock()
	if len(above) > 0 {
		s := fmt.Sprintf("rank(s) %s have not connected", strings.Join(above, ", "))
		if turned > 0 && counted {
			s += fmt.Sprintf(" (%d connection(s) turned away so far)", turned)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
