package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// DefaultTimeout is how long, in real time, a blocking call waits without
// progress before it fails with transport.ErrTimeout, unless
// Config.Timeout says otherwise.
const DefaultTimeout = 30 * time.Second

// SlowLink makes the directed link From → To slower: Alpha and Beta of
// every message on it are multiplied by Factor.
type SlowLink struct {
	From, To int
	Factor   float64
}

// Config is a simulated world.
type Config struct {
	// Ranks is the number of ranks, at least 1.
	Ranks int
	// LocalSize is the number of consecutive ranks per node (the last node
	// smaller when it does not divide Ranks). 0, or Ranks or more, puts
	// every rank on one node.
	LocalSize int
	// Model is the cost model the world runs by (package cost): its
	// links, reduction cost, ports, shared NICs and cores bound.
	//
	//   - Intra is the link between two ranks of one node (a rank to
	//     itself included), Inter the link between ranks of different
	//     nodes; a message of n bytes occupies the sender's egress port
	//     for n·β (β of the size regime n falls in: cost.Link) and arrives
	//     α + n·β after it started.
	//   - Gamma is the cost in seconds per byte of reducing a received
	//     message (a receive into a sink that is not a transport.Placer).
	//   - Ports is how many messages a rank can have on the wire at once,
	//     to distinct peers, with the rank going on while they travel (its
	//     egress ports). 0 is a rank that sends one message at a time and
	//     is itself busy for each message's n·β; k ≥ 1 is a rank whose
	//     send is handed to the first of its k ports to be free (and waits
	//     only for that), each port carrying one message at a time and
	//     each link (ordered pair of ranks) one message at a time. See the
	//     package documentation's link model.
	//   - NICs, when ≥ 1, is how many NICs the ranks of a node share for
	//     their inter-node messages: local rank i sends through NIC i mod
	//     NICs of its node, which carries one message at a time, in the
	//     order the messages were ready (nic.go). 0 gives every rank its
	//     own inter-node link. A rank must end its program by blocking in
	//     AlignClocks or closing: a rank that stops calling without either
	//     holds up its NIC.
	//   - Cores, when ≥ 1, is how many cores the ranks of a node share for
	//     the work of their messages (each send's n·β, at the link's
	//     large-message rate Beta whatever the message's size regime) and
	//     reductions (n·γ): AlignClocks sets the clocks to no earlier than
	//     the previous alignment plus the busiest node's work since then
	//     divided by Cores (cost.Model.Bounded). The bound holds between
	//     alignments, not inside them: time a collective between two
	//     AlignClocks. 0: no bound.
	//   - ExchangeWork, with Cores set, is the work of a byte sent by an
	//     Exchange whose destination is the rank it receives from (a
	//     pairwise exchange), as a fraction of a one-way byte's n·β. 0 is 1.
	//   - LoneAlpha is the α of a lone send, a message sent by Send (its
	//     sender receives nothing in that step), as a fraction of its
	//     link's Alpha; an Exchange's message keeps Alpha. 0 is 1.
	//   - CacheWork and CacheWorkBytes, with Cores set: the work counted
	//     between two alignments is CacheWork times itself when the
	//     largest collective a message of it belongs to has at most
	//     CacheWorkBytes bytes per rank, which CollectiveBytes tells from
	//     a message's header. 0: no regime.
	//
	// Segment is the schedules' business, not the world's: it is ignored.
	cost.Model
	// CollectiveBytes is the bytes per rank of the collective a message
	// belongs to, from its header (allreduce.CollectiveBytes: the
	// simulator does not know the element types); needed with
	// CacheWorkBytes.
	CollectiveBytes func(transport.Header) int
	// SlowRank, when SlowFactor is not 0, is a rank every message of
	// which (sent or received) has Alpha and Beta multiplied by
	// SlowFactor. A negative SlowRank, or SlowFactor 0, means none.
	SlowRank   int
	SlowFactor float64
	// SlowLinks are directed links with their own factors; a link listed
	// twice gets the product. They multiply with SlowFactor.
	SlowLinks []SlowLink
	// Overlap gives each rank two endpoints, as package mixed does
	// (shared memory within a host, tcp between): one for the messages
	// with its node's ranks, one for the others (World.Endpoints says
	// which ranks the local one carries), so that package allreduce pipelines its topology-aware
	// compositions' blocks over them, from two goroutines of the rank,
	// and the simulator times each endpoint by a clock of its own while
	// it does (endpoints.go; the cost model's cost.Shape.Overlap).
	Overlap bool
	// TimingOnly accounts payload bytes without moving them where they
	// lie in the world's virtual arena (World.Buffer): see the package
	// documentation.
	TimingOnly bool
	// Timeout bounds, in real time, how long a blocking call waits for
	// progress (default DefaultTimeout).
	Timeout time.Duration
}

func finiteNonNeg(x float64) bool { return x >= 0 && !math.IsInf(x, 1) }

func positiveFactor(x float64) bool { return x > 0 && !math.IsInf(x, 1) }

func invalid(format string, args ...any) error {
	return fmt.Errorf("sim: %s: %w", fmt.Sprintf(format, args...), transport.ErrInvalid)
}

// validate reports the first field of c that is out of range.
func (c Config) validate() error {
	if c.Ranks < 1 {
		return invalid("Config.Ranks is %d (need at least 1 rank)", c.Ranks)
	}
	if c.LocalSize < 0 {
		return invalid("Config.LocalSize is %d (need 0 or more)", c.LocalSize)
	}
	if c.NICs < 0 {
		return invalid("Config.NICs is %d (need 0 for a link per rank, or more)", c.NICs)
	}
	if c.Cores < 0 {
		return invalid("Config.Cores is %d (need 0 for no cores bound, or more)", c.Cores)
	}
	if c.ExchangeWork < 0 || math.IsInf(c.ExchangeWork, 0) || math.IsNaN(c.ExchangeWork) {
		return invalid("Config.ExchangeWork is %v (need a finite number ≥ 0; 0 means 1)", c.ExchangeWork)
	}
	if c.LoneAlpha < 0 || math.IsInf(c.LoneAlpha, 0) || math.IsNaN(c.LoneAlpha) {
		return invalid("Config.LoneAlpha is %v (need a finite number ≥ 0; 0 means 1)", c.LoneAlpha)
	}
	if c.CacheWork < 0 || math.IsInf(c.CacheWork, 0) || math.IsNaN(c.CacheWork) {
		return invalid("Config.CacheWork is %v (need a finite number ≥ 0; 0 means 1)", c.CacheWork)
	}
	if c.CacheWorkBytes < 0 {
		return invalid("Config.CacheWorkBytes is %d (need 0 or more)", c.CacheWorkBytes)
	}
	if c.CacheWorkBytes > 0 && c.CollectiveBytes == nil {
		return invalid("Config.CacheWorkBytes is %d but Config.CollectiveBytes is nil (the regime is keyed on a message's collective: give allreduce.CollectiveBytes)", c.CacheWorkBytes)
	}
	if c.Ports < 0 {
		return invalid("Config.Ports is %d (need 0 or more)", c.Ports)
	}
	for _, l := range []struct {
		name string
		x    float64
	}{
		{"Config.Intra.Alpha", c.Intra.Alpha}, {"Config.Intra.Beta", c.Intra.Beta},
		{"Config.Inter.Alpha", c.Inter.Alpha}, {"Config.Inter.Beta", c.Inter.Beta},
		{"Config.Intra.CacheBeta", c.Intra.CacheBeta}, {"Config.Inter.CacheBeta", c.Inter.CacheBeta},
		{"Config.Intra.CacheBytes", float64(c.Intra.CacheBytes)}, {"Config.Inter.CacheBytes", float64(c.Inter.CacheBytes)},
		{"Config.Intra.SmallBeta", c.Intra.SmallBeta}, {"Config.Inter.SmallBeta", c.Inter.SmallBeta},
		{"Config.Intra.SmallBytes", float64(c.Intra.SmallBytes)}, {"Config.Inter.SmallBytes", float64(c.Inter.SmallBytes)},
		{"Config.Gamma", c.Gamma},
	} {
		if !finiteNonNeg(l.x) {
			return invalid("%s is %v (need a finite number >= 0)", l.name, l.x)
		}
	}
	if c.SlowFactor != 0 && c.SlowRank >= 0 {
		if !positiveFactor(c.SlowFactor) {
			return invalid("Config.SlowFactor is %v (need a finite number > 0)", c.SlowFactor)
		}
		if c.SlowRank >= c.Ranks {
			return invalid("Config.SlowRank is %d (world of %d ranks)", c.SlowRank, c.Ranks)
		}
	} else if math.IsNaN(c.SlowFactor) || c.SlowFactor < 0 || math.IsInf(c.SlowFactor, 0) {
		return invalid("Config.SlowFactor is %v (need a finite number > 0, or 0 for none)", c.SlowFactor)
	}
	for i, s := range c.SlowLinks {
		if s.From < 0 || s.From >= c.Ranks || s.To < 0 || s.To >= c.Ranks {
			return invalid("Config.SlowLinks[%d] is link %d→%d (world of %d ranks)", i, s.From, s.To, c.Ranks)
		}
		if !positiveFactor(s.Factor) {
			return invalid("Config.SlowLinks[%d].Factor is %v (need a finite number > 0)", i, s.Factor)
		}
	}
	if c.Timeout < 0 {
		return invalid("Config.Timeout is %v (need 0 for the default, or more)", c.Timeout)
	}
	return nil
}

// transfer is the time a message of n bytes occupies the sender's egress
// port over l at factor f: its per-byte part (cost.Link.Transfer) times f.
func transfer(l cost.Link, n int, f float64) float64 { return l.Transfer(float64(n)) * f }
