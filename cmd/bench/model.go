package main

import (
	"flag"
	"fmt"
	"math"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/calibrate"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/shm"
	"github.com/ringddp/ringddp/internal/bytesize"
	"github.com/ringddp/ringddp/internal/run/launch"
)

// The simulator's default links when no profile gives them (README.md):
// a 100 Gb/s NIC with 5 µs per message between nodes, links within a node
// ten times as fast with 1 µs per message, and reductions at 64 Gb/s
// (8 GB/s: one CPU core's vector adds, as this library reduces on the
// host).
const (
	defaultGammaGbps    = 64
	defaultInterGbps    = 100
	intraOverInter      = 10
	defaultInterAlphaUS = 5
	defaultIntraAlphaUS = 1
)

// modelFlags are the cost-model flags: a profile, and overrides of its
// parameters (bandwidths in gigabits per second, latencies in µs).
type modelFlags struct {
	profile      string
	intraGbps    float64
	interGbps    float64
	alphaUS      float64
	intraAlphaUS float64
	gammaGbps    float64
	ports        int
	nics         int
	cores        int
	segment      string
}

// modelFlagNames are the flags that override one parameter of the model.
func modelFlagNames() []string {
	return []string{"intra-gbps", "inter-gbps", "alpha-us", "intra-alpha-us", "gamma-gbps", "ports", "nics", "cores", "segment"}
}

func (f *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.profile, "profile", "", "cost-model profile (JSON, as -calibrate writes it) that Auto chooses by and -explain and the pred_us column predict with; default $"+cost.ProfileEnv+". -inter-gbps, -intra-gbps, -alpha-us, -intra-alpha-us and -gamma-gbps override its parameters")
	fs.Float64Var(&f.interGbps, "inter-gbps", 0, fmt.Sprintf("bandwidth between nodes in gigabits per second (Gb/s, as NICs are sold; GB/s × 8), for messages of every size (the link's regimes of smaller messages dropped); default the profile's, else %d with -transport sim", defaultInterGbps))
	fs.Float64Var(&f.intraGbps, "intra-gbps", 0, fmt.Sprintf("bandwidth within a node in Gb/s, for messages of every size; default the profile's, else %d× -inter-gbps with -transport sim", intraOverInter))
	fs.Float64Var(&f.alphaUS, "alpha-us", 0, fmt.Sprintf("latency per message between nodes in µs (the model's inter-node α); default the profile's, else %d with -transport sim", defaultInterAlphaUS))
	fs.Float64Var(&f.intraAlphaUS, "intra-alpha-us", 0, fmt.Sprintf("latency per message within a node in µs; default the profile's, else %d with -transport sim", defaultIntraAlphaUS))
	fs.IntVar(&f.ports, "ports", 0, "how many messages a rank can have on the wire at once, to distinct peers, while it goes on (cost.Model.Ports): 0, a send holds its rank; 1, one NIC sending by DMA; N-1, a connection per peer; default the profile's, else 0")
	fs.IntVar(&f.nics, "nics", 0, "how many NICs the ranks of a node share for their inter-node messages (cost.Model.NICs; with -transport sim the simulator's NICs too, one message at a time each): 0, a link per rank; default the profile's, else 0")
	fs.IntVar(&f.cores, "cores", 0, "how many cores the ranks of a node share for moving and reducing bytes (cost.Model.Cores; with -transport sim the simulator's cores bound too): every prediction is at least the busiest node's work divided by it; 0, no bound; default the profile's, else 0; with -calibrate, default this host's logical CPUs")
	fs.StringVar(&f.segment, "segment", "", fmt.Sprintf("largest message an exchange sends at once (cost.Model.Segment; K, M suffixes): larger exchanges go in lock-step pieces of at most this size; 0: whole; default the profile's, else the transport's (%s over tcp, none in process, over shm and in the simulator)", bytesize.Format(cost.TCPSegmentBytes)))
	fs.Float64Var(&f.gammaGbps, "gamma-gbps", 0, fmt.Sprintf("reduce rate in Gb/s (bits of received payload combined per second; γ = 8 / (rate × 1e9) s/B); default the profile's, else %d with -transport sim and cost.DefaultModel's (%.0f Gb/s) elsewhere", defaultGammaGbps, 8/cost.DefaultModel(false).Gamma/1e9))
}

// resolve works out the run's model: the profile's (-profile, else
// $RINGDDP_PROFILE), else the simulator's defaults with -transport sim,
// else cost.DefaultModel(peerMemory) when a model flag is given,
// with every given model flag applied on top. m is nil when nothing says
// what the model is (a real transport without profile or model flags):
// the groups then use DefaultModel themselves. from says where it came
// from.
func (f *modelFlags) resolve(transport string, peerMemory bool, given map[string]bool, getenv func(string) string) (m *cost.Model, from string, err error) {
	var base cost.Model
	switch {
	case f.profile != "":
		p, err := cost.ReadProfile(f.profile, allreduce.KnownMeasurement)
		if err != nil {
			return nil, "", fmt.Errorf("-profile: %w", err)
		}
		base, from = p.Model, "profile "+f.profile
	default:
		p, ok, err := cost.ProfileFromEnv(getenv, allreduce.KnownMeasurement)
		switch {
		case err != nil:
			return nil, "", err
		case ok:
			base, from = p.Model, "profile $"+cost.ProfileEnv+"="+getenv(cost.ProfileEnv)
		case transport == simTransport:
			base, from = simDefaultModel(given, f), "simulator defaults"
		default:
			base, from = defaultModel(transport), "cost.DefaultModel"
		}
	}
	var set []string
	for _, o := range []struct {
		name  string
		v     float64
		apply func(m *cost.Model, v float64)
		rate  bool // a rate in Gb/s (> 0, inf allowed), else a latency in µs (≥ 0)
	}{
		{"inter-gbps", f.interGbps, func(m *cost.Model, v float64) { m.Inter = atRate(m.Inter, v) }, true},
		{"intra-gbps", f.intraGbps, func(m *cost.Model, v float64) { m.Intra = atRate(m.Intra, v) }, true},
		{"alpha-us", f.alphaUS, func(m *cost.Model, v float64) { m.Inter.Alpha = v * 1e-6 }, false},
		{"intra-alpha-us", f.intraAlphaUS, func(m *cost.Model, v float64) { m.Intra.Alpha = v * 1e-6 }, false},
		{"gamma-gbps", f.gammaGbps, func(m *cost.Model, v float64) { m.Gamma = betaOfGbps(v) }, true},
	} {
		if !given[o.name] {
			continue
		}
		switch {
		case o.rate && !(o.v > 0):
			return nil, "", fmt.Errorf("-%s %v: need a rate > 0 Gb/s (inf for a free one)", o.name, o.v)
		case !o.rate && !(o.v >= 0 && !math.IsInf(o.v, 1)):
			return nil, "", fmt.Errorf("-%s %v: need a latency ≥ 0 µs", o.name, o.v)
		}
		o.apply(&base, o.v)
		set = append(set, "-"+o.name)
	}
	if given["ports"] {
		if f.ports < 0 {
			return nil, "", fmt.Errorf("-ports %d: need 0 or more", f.ports)
		}
		base.Ports = f.ports
		set = append(set, "-ports")
	}
	if given["nics"] {
		if f.nics < 0 {
			return nil, "", fmt.Errorf("-nics %d: need 0 or more", f.nics)
		}
		base.NICs = f.nics
		set = append(set, "-nics")
	}
	if given["cores"] {
		if f.cores < 0 {
			return nil, "", fmt.Errorf("-cores %d: need 0 or more", f.cores)
		}
		base.Cores = f.cores
		set = append(set, "-cores")
	}
	if given["segment"] {
		n, err := bytesize.Parse(f.segment)
		if err != nil {
			return nil, "", fmt.Errorf("-segment %q: %w", f.segment, err)
		}
		base.Segment = n
		set = append(set, "-segment")
	}
	if len(set) > 0 {
		from += " with " + strings.Join(set, ", ")
	} else if from == "cost.DefaultModel" {
		return nil, "", nil
	}
	if err := base.Validate(); err != nil {
		return nil, "", err
	}
	return &base, from, nil
}

// simDefaultModel is the simulator's model without a profile: the default
// links, the intra-node bandwidth 10× the inter-node one (-inter-gbps
// included), Gamma from cost.DefaultModel.
func simDefaultModel(given map[string]bool, f *modelFlags) cost.Model {
	inter := float64(defaultInterGbps)
	if given["inter-gbps"] && f.interGbps > 0 {
		inter = f.interGbps
	}
	return cost.Model{
		Intra: cost.Link{Alpha: defaultIntraAlphaUS * 1e-6, Beta: betaOfGbps(intraOverInter * inter)},
		Inter: cost.Link{Alpha: defaultInterAlphaUS * 1e-6, Beta: betaOfGbps(inter)},
		Gamma: betaOfGbps(defaultGammaGbps),
	}
}

// atRate is l moving every message at gbps: its β, and no regimes of
// smaller messages (a rate given for a link is its rate at every size; a
// regime fitted on loopback, faster than it, would leave the link fast
// for the messages of up to its size).
func atRate(l cost.Link, gbps float64) cost.Link {
	return cost.Link{Alpha: l.Alpha, Beta: betaOfGbps(gbps)}
}

// betaOfGbps is the seconds per byte of a rate in gigabits per second.
func betaOfGbps(gbps float64) float64 { return 8 / (gbps * 1e9) }

// describeModel spells a model out in the flags' units: each link's
// bandwidth, its latency and its regimes of smaller messages, γ, the
// ports when a rank's sends overlap, and what a node's ranks share.
func describeModel(m cost.Model) string {
	s := fmt.Sprintf("inter %s α %.3g µs%s; intra %s α %.3g µs%s; γ %s",
		calibrate.RateText(m.Inter.Beta), m.Inter.Alpha*1e6, regimesText(m.Inter), calibrate.RateText(m.Intra.Beta), m.Intra.Alpha*1e6, regimesText(m.Intra), calibrate.RateText(m.Gamma))
	if m.Ports > 0 {
		s += fmt.Sprintf("; ports %d", m.Ports)
	}
	if m.NICs > 0 {
		s += fmt.Sprintf("; a node's ranks share %d NIC(s)", m.NICs)
	}
	if m.Cores > 0 {
		s += fmt.Sprintf("; a node's ranks share %d core(s)", m.Cores)
		if m.ExchangeWork > 0 && m.ExchangeWork != 1 {
			s += fmt.Sprintf(", a byte exchanged pairwise costs them %.3g of one sent one way", m.ExchangeWork)
		}
		if m.CacheWorkBytes > 0 && m.CacheWork > 0 {
			s += fmt.Sprintf(", %.3g of their work in collectives of up to %s a rank", m.CacheWork, bytesize.Format(m.CacheWorkBytes))
		}
	}
	if m.LoneAlpha > 0 && m.LoneAlpha != 1 {
		s += fmt.Sprintf("; a lone send's α %.3g of an exchange's", m.LoneAlpha)
	}
	if m.Segment > 0 {
		s += fmt.Sprintf("; messages in pieces of at most %s", bytesize.Format(m.Segment))
	}
	return s
}

// regimesText is a link's regimes of smaller messages, if any: ", up to
// SIZE RATE" each, the smallest last.
func regimesText(l cost.Link) string {
	var s string
	if l.CacheBytes > 0 {
		s += fmt.Sprintf(", up to %s %s", bytesize.Format(l.CacheBytes), calibrate.RateText(l.CacheBeta))
	}
	if l.SmallBytes > 0 {
		s += fmt.Sprintf(", up to %s %s", bytesize.Format(l.SmallBytes), calibrate.RateText(l.SmallBeta))
	}
	return s
}

// peerMemory reports whether the transport's ranks can read one
// another's buffers (transport.PeerMemory): in process, yes; shm, as
// copies of up to lendLimit bytes; tcp and the simulator, no.
func peerMemory(transport string) bool { return transport == "inproc" || transport == "shm" }

// lendLimit is the transport's Shape.LendLimit: shm lends copies of at
// most shm.ExposeLimit bytes; 0 elsewhere.
func lendLimit(transport string) int {
	if transport == "shm" {
		return shm.ExposeLimit
	}
	return 0
}

// defaultModel is the groups' default model on the transport.
func defaultModel(transport string) cost.Model {
	return cost.DefaultModelFor(cost.Shape{PeerMemory: peerMemory(transport), LendLimit: lendLimit(transport)})
}

// plannedShape is the cost model's shape of the run as the flags describe
// it (-ranks, -local-size or -nodes; over tcp one node per host of the
// launcher's ranks): what -explain and -algo all go by. A run predicts
// from the shape its groups learn.
func plannedShape(cfg *config) cost.Shape {
	n := cfg.ranks
	var s cost.Shape
	switch {
	case cfg.transport == simTransport: // every simulated rank knows its node
		ls := cfg.localSize
		if ls == 0 {
			ls = n
		}
		s = cost.NodesShape(n, ls)
	case cfg.mp != nil: // tcp: every rank knows its node (its host)
		ls := cfg.mp.LocalRanks
		if !cfg.mp.Launcher && cfg.mp.Env.LocalWorldSize > 0 {
			ls = cfg.mp.Env.LocalWorldSize
		}
		if ls < 1 {
			ls = n
		}
		s = cost.NodesShape(n, ls)
	default:
		s = cost.NodesShape(n, cfg.localSize)
	}
	s.PeerMemory, s.LendLimit = peerMemory(cfg.transport), lendLimit(cfg.transport)
	// -transport auto is the mixed transport: shared memory within a
	// host, tcp between, on which the compositions overlap their blocks.
	s.Overlap = cfg.transport == launch.Auto || cfg.simOverlap // -sim-overlap: the simulator's two endpoints
	return s
}

// explainModel is the model -explain and the sweep's predictions use:
// the run's, else the groups' default.
func (c *config) explainModel() (cost.Model, string) {
	if c.model != nil {
		return *c.model, c.modelFrom
	}
	return defaultModel(c.transport), "cost.DefaultModel (no profile: calibrate with -calibrate, or give -profile)"
}
