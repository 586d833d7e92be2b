package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// DefaultTimeout is how long, in real time, a blocking call waits without
// progress before it fails with transport.ErrTimeout, unless
// Config.Timeout says otherwise.
const DefaultTimeout = 30 * time.Second

// Link is the cost of one class of link: a message of n bytes occupies
// the sender's egress port for n·Beta seconds and arrives Alpha + n·Beta
// seconds after it started.
type Link struct {
	Alpha float64 // seconds per message (latency)
	Beta  float64 // seconds per byte (inverse bandwidth)
	// CacheBeta, where CacheBytes > 0, is the seconds per byte of
	// messages of at most CacheBytes bytes instead of Beta (memory that
	// fits the caches, as allreduce.Link's cache regime).
	CacheBeta  float64
	CacheBytes int
	// SmallBeta, where SmallBytes > 0, is the seconds per byte of
	// messages of at most SmallBytes bytes, before the cache regime (as
	// allreduce.Link's small-message regime: loopback messages that fit
	// the socket buffers).
	SmallBeta  float64
	SmallBytes int
}

// transfer is the time a message of n bytes occupies the sender's egress
// port at factor f: n·Beta·f, or n·SmallBeta·f or n·CacheBeta·f in the
// small-message or cache regime.
func (l Link) transfer(n int, f float64) float64 {
	switch {
	case l.SmallBytes > 0 && n <= l.SmallBytes:
		return float64(n) * l.SmallBeta * f
	case l.CacheBytes > 0 && n <= l.CacheBytes:
		return float64(n) * l.CacheBeta * f
	}
	return float64(n) * l.Beta * f
}

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
	// Intra is the link between two ranks of one node (a rank to itself
	// included), Inter the link between ranks of different nodes.
	Intra, Inter Link
	// Gamma is the cost in seconds per byte of reducing a received
	// message (a receive into a sink that is not a transport.Placer).
	Gamma float64
	// Ports is how many messages a rank can have on the wire at once, to
	// distinct peers, with the rank going on while they travel (its
	// egress ports: NICs with DMA, or connections each with a writer and
	// a socket buffer). 0, the default, is a rank that sends one message
	// at a time and is itself busy for each message's n·β; k ≥ 1 is a
	// rank whose send is handed to the first of its k ports to be free
	// (and waits only for that), each port carrying one message at a time
	// and each link (ordered pair of ranks) one message at a time. See
	// the package documentation's link model.
	Ports int
	// NICs, when ≥ 1, is how many NICs the ranks of a node share for
	// their inter-node messages: local rank i sends through NIC i mod
	// NICs of its node, which carries one message at a time, in the
	// order the messages were ready (nic.go). 0, the default, gives
	// every rank its own inter-node link. A rank must end its program by
	// blocking in AlignClocks or closing: a rank that stops calling
	// without either holds up its NIC.
	NICs int
	// Cores, when ≥ 1, is how many cores the ranks of a node share for
	// the work of their messages (each send's n·β, at the link's
	// large-message rate Beta whatever the message's size regime) and
	// reductions (n·γ): AlignClocks sets the clocks to no earlier than
	// the previous alignment plus the busiest node's work since then
	// divided by Cores, the allreduce package's cores bound (Model.Cores),
	// which binds when a node's ranks outnumber its cores. The bound holds
	// between alignments, not inside them: time a collective between two
	// AlignClocks. 0, the default: no bound.
	Cores int
	// ExchangeWork, with Cores set, is the work of a byte sent by an
	// Exchange whose destination is the rank it receives from (a pairwise
	// exchange), as a fraction of a one-way byte's n·β (the allreduce
	// package's Model.ExchangeWork). 0, the default, is 1.
	ExchangeWork float64
	// LoneAlpha is the α of a lone send, a message sent by Send (its
	// sender receives nothing in that step), as a fraction of its link's
	// Alpha; an Exchange's message keeps Alpha (the allreduce package's
	// Model.LoneAlpha). 0, the default, is 1.
	LoneAlpha float64
	// CacheWork and CacheWorkBytes, with Cores set: the work counted
	// between two alignments is CacheWork times itself when the largest
	// collective a message of it belongs to has at most CacheWorkBytes
	// bytes per rank (the allreduce package's Model.CacheWork), which
	// CollectiveBytes tells from a message's header (allreduce.
	// CollectiveBytes: the simulator does not know the element types).
	// 0, the default: no regime.
	CacheWork       float64
	CacheWorkBytes  int
	CollectiveBytes func(transport.Header) int
	// SlowRank, when SlowFactor is not 0, is a rank every message of
	// which (sent or received) has Alpha and Beta multiplied by
	// SlowFactor. A negative SlowRank, or SlowFactor 0, means none.
	SlowRank   int
	SlowFactor float64
	// SlowLinks are directed links with their own factors; a link listed
	// twice gets the product. They multiply with SlowFactor.
	SlowLinks []SlowLink
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
