package mpconn

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// DefaultProgressEvery is how often a forming world's waiting rank says
// whom it still waits for.
const DefaultProgressEvery = 15 * time.Second

// Reporter says, while a world forms, what a waiting rank sees, so that a
// misconfiguration shows within seconds rather than at the join timeout:
//
//   - each connection it turns away, with where it came from and why
//     (TurnedAway). Lines are rate-limited by cause and source: the first
//     connection of a (source host, cause) pair is printed at once; later
//     ones of the same pair are counted and printed as one line at the next
//     progress report, if any came. At most maxCauses pairs are tracked;
//     connections of further pairs are counted together.
//   - every DefaultProgressEvery, whom it still waits for and how long it
//     has waited of its limit (Waiting).
//
// Lines go to the log function given to NewReporter, one call per line
// without a trailing newline. A nil *Reporter reports nothing.
type Reporter struct {
	prefix string // "tcp: rank 0: "
	log    func(string)
	limit  time.Duration
	start  time.Time

	mu     sync.Mutex
	causes map[causeKey]int // connections not yet printed, per pair
	order  []causeKey       // pairs in order of first sight
	others int              // connections of pairs beyond maxCauses, not yet printed
}

// maxCauses bounds the (source, cause) pairs a Reporter tracks.
const maxCauses = 32

type causeKey struct{ host, cause string }

// NewReporter reports for rank of transport name ("tcp", "shm"), which
// waits at most limit; log nil writes the lines to os.Stderr.
func NewReporter(name string, rank int, log func(string), limit time.Duration) *Reporter {
	if log == nil {
		log = func(line string) { fmt.Fprintln(os.Stderr, line) }
	}
	return &Reporter{prefix: fmt.Sprintf("%s: rank %d: ", name, rank), log: log, limit: limit, start: time.Now(), causes: make(map[causeKey]int)}
}

// TurnedAway reports a connection turned away before it authenticated:
// from (the full source, as "127.0.0.1:53122"), host (the part that
// groups sources, as "127.0.0.1") and why ("authentication failed (wrong
// secret?)"). The text is the caller's: pass anything the peer sent
// through untrusted.Printable first.
func (r *Reporter) TurnedAway(from, host, why string) {
	if r == nil {
		return
	}
	k := causeKey{host, why}
	r.mu.Lock()
	n, seen := r.causes[k]
	first := false
	switch {
	case seen:
		r.causes[k] = n + 1
	case len(r.order) >= maxCauses:
		r.others++
	default:
		r.causes[k] = 0
		r.order = append(r.order, k)
		first = true
	}
	r.mu.Unlock()
	if first {
		r.log(fmt.Sprintf("%sturned away a connection from %s: %s", r.prefix, from, why))
	}
}

// Waiting reports whom the rank still waits for (missing, as "1, 3") and
// detail, if not empty (what it knows of them), and then the connections
// turned away since the last report that were not printed yet.
func (r *Reporter) Waiting(missing, detail string) {
	if r == nil {
		return
	}
	line := fmt.Sprintf("%sstill waiting for rank(s) %s (%d s of %v)", r.prefix, missing, int(time.Since(r.start).Seconds()), r.limit)
	if detail != "" {
		line += ": " + detail
	}
	r.log(line)
	r.mu.Lock()
	var lines []string
	for _, k := range r.order {
		if n := r.causes[k]; n > 0 {
			lines = append(lines, fmt.Sprintf("%sturned away %d more connection(s) from %s: %s", r.prefix, n, k.host, k.cause))
			r.causes[k] = 0
		}
	}
	if r.others > 0 {
		lines = append(lines, fmt.Sprintf("%sturned away %d more connection(s) for other causes or from other sources", r.prefix, r.others))
		r.others = 0
	}
	r.mu.Unlock()
	for _, l := range lines {
		r.log(l)
	}
}
