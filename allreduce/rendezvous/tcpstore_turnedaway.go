package rendezvous

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// TurnedAway counts the connections a StoreServer closed without serving
// them, and where they came from: what a rank that timed out forming its
// job wants to know.
type TurnedAway struct {
	// Evicted: closed while authenticating, to make room for a newer
	// connection (MaxPending or MaxConns reached).
	Evicted int64
	// Refused: closed on arrival, every one of MaxConns connections being
	// authenticated.
	Refused int64
	// Abandoned: did not authenticate within HandshakeTimeout, or hung up
	// first.
	Abandoned int64
	// Rejected: failed authentication (a wrong secret, the other mode, not
	// this protocol).
	Rejected int64
	// Tampered: authenticated, then closed because a request failed its
	// frame authentication (ErrFrameAuth): changed in transit.
	Tampered int64
	// From counts them by remote host, most first, for the first
	// MaxTurnedAwayHosts hosts seen.
	From []HostCount
	// FromOthers counts those from further hosts.
	FromOthers int64
}

// HostCount is how many connections came from one remote host.
type HostCount struct {
	Host  string
	Count int64
}

// MaxTurnedAwayHosts is how many remote hosts TurnedAway names.
const MaxTurnedAwayHosts = 16

// Total is how many connections were turned away.
func (t TurnedAway) Total() int64 {
	return t.Evicted + t.Refused + t.Abandoned + t.Rejected + t.Tampered
}

// String words the counts for an error message, e.g. "the store turned
// away 812 connections (800 evicted while authenticating, 12 abandoned
// authentication) from 10.0.0.9 (806), 10.0.0.3 (6)"; "" when none.
func (t TurnedAway) String() string {
	if t.Total() == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the store turned away %d connection", t.Total())
	if t.Total() != 1 {
		b.WriteByte('s')
	}
	sep := " ("
	for _, p := range []struct {
		n    int64
		what string
	}{{t.Evicted, "evicted while authenticating"}, {t.Refused, "refused at the connection limit"},
		{t.Abandoned, "abandoned authentication"}, {t.Rejected, "failed authentication"},
		{t.Tampered, "closed after a frame failed authentication"}} {
		if p.n > 0 {
			fmt.Fprintf(&b, "%s%d %s", sep, p.n, p.what)
			sep = ", "
		}
	}
	b.WriteString(")")
	sep = " from "
	for _, h := range t.From {
		fmt.Fprintf(&b, "%s%s (%d)", sep, h.Host, h.Count)
		sep = ", "
	}
	if t.FromOthers > 0 {
		fmt.Fprintf(&b, "%s%d from other hosts", sep, t.FromOthers)
	}
	return b.String()
}

// TurnedAway reports the connections the server has turned away since it
// started.
func (s *StoreServer) TurnedAway() TurnedAway {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.turned.report()
}

// turnedAwayLog keeps TurnedAway's counts.
type turnedAwayLog struct {
	counts TurnedAway // without From
	hosts  map[string]int64
}

type turnReason int

const (
	turnEvicted turnReason = iota
	turnRefused
	turnAbandoned
	turnRejected
	turnTampered
)

func (l *turnedAwayLog) note(why turnReason, host string) {
	switch why {
	case turnEvicted:
		l.counts.Evicted++
	case turnRefused:
		l.counts.Refused++
	case turnAbandoned:
		l.counts.Abandoned++
	case turnRejected:
		l.counts.Rejected++
	case turnTampered:
		l.counts.Tampered++
	}
	if l.hosts == nil {
		l.hosts = make(map[string]int64)
	}
	if _, ok := l.hosts[host]; ok || len(l.hosts) < MaxTurnedAwayHosts {
		l.hosts[host]++
	} else {
		l.counts.FromOthers++
	}
}

func (l *turnedAwayLog) report() TurnedAway {
	t := l.counts
	t.From = make([]HostCount, 0, len(l.hosts))
	for h, n := range l.hosts {
		t.From = append(t.From, HostCount{h, n})
	}
	slices.SortFunc(t.From, func(a, b HostCount) int {
		if a.Count != b.Count {
			return cmp.Compare(b.Count, a.Count)
		}
		return strings.Compare(a.Host, b.Host)
	})
	return t
}
