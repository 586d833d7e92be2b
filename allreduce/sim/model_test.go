package sim_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/sim"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// The link model checked on hand-computed times. Each rank's calls run on
// the test's goroutine in an order that cannot block forever (sends are
// eager), so no goroutines are needed.

var (
	intra = cost.Link{Alpha: 1e-6, Beta: 1e-9}
	inter = cost.Link{Alpha: 20e-6, Beta: 1e-8}
	gamma = 5e-11
)

func modelWorld(t *testing.T, ranks, localSize int) *sim.World {
	return newWorld(t, sim.Config{Ranks: ranks, LocalSize: localSize, Model: cost.Model{Intra: intra, Inter: inter, Gamma: gamma}})
}

// near requires got to equal want up to rounding.
func near(t *testing.T, want, got float64, what string) {
	t.Helper()
	if math.Abs(got-want) > 1e-12*math.Max(1, math.Abs(want)) {
		t.Fatalf("%s: clock %.15g, want %.15g", what, got, want)
	}
}

func send(t *testing.T, w *sim.World, from, to int, h transport.Header, n int) {
	t.Helper()
	require.NoError(t, w.Conn(from).Send(bg, to, h, make([]byte, n)))
}

func recvPlace(t *testing.T, w *sim.World, at, from int, h transport.Header, n int) {
	t.Helper()
	require.NoError(t, w.Conn(at).Recv(bg, from, h, n, &placer{dst: make([]byte, n)}))
}

func recvReduce(t *testing.T, w *sim.World, at, from int, h transport.Header, n int) {
	t.Helper()
	require.NoError(t, w.Conn(at).Recv(bg, from, h, n, &sink{}))
}

func TestSingleMessage(t *testing.T) {
	const n = 1000
	w := modelWorld(t, 2, 0)
	send(t, w, 0, 1, hdr(0), n)
	near(t, n*intra.Beta, w.Now(0), "sender")
	recvPlace(t, w, 1, 0, hdr(0), n)
	near(t, intra.Alpha+n*intra.Beta, w.Now(1), "receiver")
	near(t, intra.Alpha+n*intra.Beta, w.MaxNow(), "MaxNow")

	// A receiver already later than the arrival only pays γ, if anything.
	w.Conn(1).Advance(1)
	start := w.Now(1)
	send(t, w, 0, 1, hdr(1), n)
	recvPlace(t, w, 1, 0, hdr(1), n)
	near(t, start, w.Now(1), "late receiver, placer")
	send(t, w, 0, 1, hdr(2), n)
	recvReduce(t, w, 1, 0, hdr(2), n)
	near(t, start+n*gamma, w.Now(1), "late receiver, reducing sink")

	// An empty message costs α.
	w2 := modelWorld(t, 2, 0)
	send(t, w2, 0, 1, hdr(0), 0)
	near(t, 0, w2.Now(0), "empty send")
	recvReduce(t, w2, 1, 0, hdr(0), 0)
	near(t, intra.Alpha, w2.Now(1), "empty receive")
}

func TestEgressSerialised(t *testing.T) {
	const n = 4096
	w := modelWorld(t, 3, 0)
	send(t, w, 0, 1, hdr(0), n)
	send(t, w, 0, 2, hdr(0), n) // leaves once the first has left
	near(t, 2*n*intra.Beta, w.Now(0), "sender after two sends")
	recvPlace(t, w, 1, 0, hdr(0), n)
	recvPlace(t, w, 2, 0, hdr(0), n)
	near(t, intra.Alpha+n*intra.Beta, w.Now(1), "first receiver")
	near(t, n*intra.Beta+intra.Alpha+n*intra.Beta, w.Now(2), "second receiver")

	// Two messages to one receiver: it holds the later arrival.
	w = modelWorld(t, 2, 0)
	send(t, w, 0, 1, hdr(0), n)
	send(t, w, 0, 1, hdr(1), 2*n)
	recvPlace(t, w, 1, 0, hdr(0), n)
	near(t, intra.Alpha+n*intra.Beta, w.Now(1), "after the first")
	recvPlace(t, w, 1, 0, hdr(1), 2*n)
	near(t, n*intra.Beta+intra.Alpha+2*n*intra.Beta, w.Now(1), "after the second")
}

// With Config.Ports, a send holds a port, not the rank: sends to distinct
// peers travel at once up to the number of ports, the sender goes on when
// a port takes its message, and a link carries one message at a time.
func TestPorts(t *testing.T) {
	const n = 4096
	tx := n * intra.Beta
	w := newWorld(t, sim.Config{Ranks: 4, Model: cost.Model{Intra: intra, Inter: inter, Gamma: gamma, Ports: 2}})
	send(t, w, 0, 1, hdr(0), n)
	near(t, 0, w.Now(0), "sender after one send")
	send(t, w, 0, 2, hdr(0), n) // the second port
	near(t, 0, w.Now(0), "sender after two sends")
	send(t, w, 0, 3, hdr(0), n) // waits for the first port
	near(t, tx, w.Now(0), "sender after three sends")
	recvPlace(t, w, 1, 0, hdr(0), n)
	recvPlace(t, w, 2, 0, hdr(0), n)
	recvPlace(t, w, 3, 0, hdr(0), n)
	near(t, intra.Alpha+tx, w.Now(1), "first receiver")
	near(t, intra.Alpha+tx, w.Now(2), "second receiver")
	near(t, tx+intra.Alpha+tx, w.Now(3), "third receiver")

	// One link carries one message at a time, whatever the ports.
	w = newWorld(t, sim.Config{Ranks: 2, Model: cost.Model{Intra: intra, Inter: inter, Gamma: gamma, Ports: 4}})
	send(t, w, 0, 1, hdr(0), n)
	send(t, w, 0, 1, hdr(1), n)
	near(t, tx, w.Now(0), "sender after two sends on one link")
	recvPlace(t, w, 1, 0, hdr(0), n)
	recvPlace(t, w, 1, 0, hdr(1), n)
	near(t, tx+intra.Alpha+tx, w.Now(1), "receiver of both")

	// An exchange with a port: the clock is the receive's end, the send
	// having left at once.
	w = newWorld(t, sim.Config{Ranks: 2, Model: cost.Model{Intra: intra, Inter: inter, Gamma: gamma, Ports: 1}})
	c0, c1 := w.Conn(0), w.Conn(1)
	require.NoError(t, c1.Send(bg, 0, hdr(0), make([]byte, 1)))
	require.NoError(t, c0.Exchange(bg, 1, hdr(0), make([]byte, 4*n), 1, hdr(0), 1, &sink{}))
	near(t, intra.Alpha+intra.Beta+gamma, w.Now(0), "exchange")
}

// The small-message and cache regimes of a link: each message's bytes
// cost the β of the smallest regime it fits.
func TestLinkRegimes(t *testing.T) {
	l := cost.Link{Alpha: 1e-6, Beta: 1e-9, CacheBeta: 5e-10, CacheBytes: 8192, SmallBeta: 1e-10, SmallBytes: 1024}
	for _, c := range []struct {
		n    int
		beta float64
	}{{1024, l.SmallBeta}, {1025, l.CacheBeta}, {8192, l.CacheBeta}, {8193, l.Beta}} {
		w := newWorld(t, sim.Config{Ranks: 2, Model: cost.Model{Intra: l, Inter: l}})
		send(t, w, 0, 1, hdr(0), c.n)
		recvPlace(t, w, 1, 0, hdr(0), c.n)
		near(t, l.Alpha+float64(c.n)*c.beta, w.Now(1), fmt.Sprintf("%d bytes", c.n))
	}
}

func TestIntraInter(t *testing.T) {
	const n = 512
	// 5 ranks in nodes of 2: {0,1} {2,3} {4}.
	w := modelWorld(t, 5, 2)
	for r, want := range []struct {
		node         string
		local, lsize int
	}{{"node0", 0, 2}, {"node0", 1, 2}, {"node1", 0, 2}, {"node1", 1, 2}, {"node2", 0, 1}} {
		c := w.Conn(r)
		require.Equal(t, want.node, c.NodeName(), "rank %d", r)
		require.Equal(t, want.local, c.LocalRank(), "rank %d", r)
		require.Equal(t, want.lsize, c.LocalSize(), "rank %d", r)
	}
	send(t, w, 0, 1, hdr(0), n) // intra
	send(t, w, 0, 4, hdr(0), n) // inter
	recvPlace(t, w, 1, 0, hdr(0), n)
	recvPlace(t, w, 4, 0, hdr(0), n)
	near(t, intra.Alpha+n*intra.Beta, w.Now(1), "intra receiver")
	near(t, n*intra.Beta+inter.Alpha+n*inter.Beta, w.Now(4), "inter receiver")
	near(t, n*intra.Beta+n*inter.Beta, w.Now(0), "sender")

	// Without LocalSize (or with LocalSize >= Ranks) every link is intra.
	for _, k := range []int{0, 5, 9} {
		w := modelWorld(t, 5, k)
		require.Equal(t, "node0", w.Conn(4).NodeName())
		require.Equal(t, 4, w.Conn(4).LocalRank())
		require.Equal(t, 5, w.Conn(4).LocalSize())
		send(t, w, 0, 4, hdr(0), n)
		recvPlace(t, w, 4, 0, hdr(0), n)
		near(t, intra.Alpha+n*intra.Beta, w.Now(4), "one node")
	}
	// A rank's message to itself is intra.
	w = modelWorld(t, 4, 1)
	send(t, w, 2, 2, hdr(0), n)
	recvReduce(t, w, 2, 2, hdr(0), n)
	near(t, n*intra.Beta+intra.Alpha+n*gamma, w.Now(2), "self")
}

func TestGamma(t *testing.T) {
	const n = 10000
	w := modelWorld(t, 2, 0)
	send(t, w, 0, 1, hdr(0), n)
	recvReduce(t, w, 1, 0, hdr(0), n)
	near(t, intra.Alpha+n*intra.Beta+n*gamma, w.Now(1), "reducing sink")
	w = modelWorld(t, 2, 0)
	send(t, w, 0, 1, hdr(0), n)
	recvPlace(t, w, 1, 0, hdr(0), n)
	near(t, intra.Alpha+n*intra.Beta, w.Now(1), "placer")
}

func TestExchangeMaxRule(t *testing.T) {
	// Rank 0 sends big and receives small, rank 1 the reverse and starts
	// late: Exchange ends at the later of its send and its receive.
	for _, d := range []float64{0, 3e-6, 1e-3} {
		w := modelWorld(t, 2, 1) // two nodes: inter links
		a, b := inter.Alpha, inter.Beta
		const big, small = 100000, 10
		w.Conn(1).Advance(d)
		res := goErr(func() error {
			return w.Conn(1).Exchange(bg, 0, hdr(0), make([]byte, small), 0, hdr(0), big, &placer{dst: make([]byte, big)})
		})
		require.NoError(t, w.Conn(0).Exchange(bg, 1, hdr(0), make([]byte, big), 1, hdr(0), small, &sink{}))
		require.NoError(t, wait(t, res, 5e9))
		// Rank 0: send done at big·β; its receive ends at rank 1's
		// arrival, d + α + small·β, plus small·γ.
		near(t, math.Max(big*b, d+a+small*b+small*gamma), w.Now(0), "rank 0")
		// Rank 1: send done at d + small·β; receive at max(d, α + big·β).
		near(t, math.Max(d+small*b, math.Max(d, a+big*b)), w.Now(1), "rank 1")
	}
}

func TestSlowFactors(t *testing.T) {
	const n = 1000
	cfg := sim.Config{
		Ranks:      3,
		SlowRank:   1,
		SlowFactor: 3,
		SlowLinks:  []sim.SlowLink{{From: 0, To: 2, Factor: 2}, {From: 1, To: 2, Factor: 5}, {From: 1, To: 2, Factor: 1.5}},
		Model:      cost.Model{Intra: intra, Inter: inter, Gamma: gamma},
	}
	for _, l := range []struct {
		from, to int
		f        float64
	}{
		{0, 1, 3}, {1, 0, 3}, {0, 2, 2}, {2, 0, 1}, {1, 2, 3 * 5 * 1.5}, {2, 1, 3}, {1, 1, 3},
	} {
		w := newWorld(t, cfg)
		send(t, w, l.from, l.to, hdr(0), n)
		near(t, n*intra.Beta*l.f, w.Now(l.from), "sender")
		recvPlace(t, w, l.to, l.from, hdr(0), n)
		near(t, intra.Alpha*l.f+n*intra.Beta*l.f, w.Now(l.to), "receiver")
	}
	// SlowFactor 0, or a negative SlowRank, means no slow rank.
	for _, c := range []sim.Config{{Ranks: 2, Model: cost.Model{Intra: intra}, SlowRank: 0}, {Ranks: 2, Model: cost.Model{Intra: intra}, SlowRank: -1, SlowFactor: 7}} {
		w := newWorld(t, c)
		send(t, w, 0, 1, hdr(0), n)
		recvPlace(t, w, 1, 0, hdr(0), n)
		near(t, intra.Alpha+n*intra.Beta, w.Now(1), "no slow rank")
	}
}

func TestAdvanceAlignClocks(t *testing.T) {
	const n = 4
	w := modelWorld(t, n, 0)
	for round, adv := range [][]float64{{1, 5, 2, 0}, {0, 0, 0, 0.5}} {
		res := make([]<-chan error, n)
		for r := range n {
			c := w.Conn(r)
			c.Advance(adv[r])
			res[r] = goErr(func() error { return c.AlignClocks(bg) })
		}
		for r := range n {
			require.NoError(t, wait(t, res[r], 5e9), "round %d rank %d", round, r)
		}
		want := []float64{5, 5.5}[round]
		for r := range n {
			near(t, want, w.Now(r), "aligned")
		}
	}
	// Advance ignores what is not a finite positive duration.
	c := w.Conn(0)
	before := c.Now()
	for _, d := range []float64{-1, 0, math.NaN(), math.Inf(1)} {
		c.Advance(d)
	}
	near(t, before, c.Now(), "after bad Advance")
	require.Equal(t, 0.0, w.Now(-1))
	require.Nil(t, w.Conn(n))
}

func TestConfigInvalid(t *testing.T) {
	ok := sim.Config{Ranks: 4, LocalSize: 2, Model: cost.Model{Intra: intra, Inter: inter, Gamma: gamma}}
	for field, mod := range map[string]func(*sim.Config){
		"Config.Ranks":               func(c *sim.Config) { c.Ranks = 0 },
		"Config.LocalSize":           func(c *sim.Config) { c.LocalSize = -1 },
		"Config.Ports":               func(c *sim.Config) { c.Ports = -1 },
		"Config.NICs":                func(c *sim.Config) { c.NICs = -1 },
		"Config.Cores":               func(c *sim.Config) { c.Cores = -1 },
		"Config.ExchangeWork":        func(c *sim.Config) { c.ExchangeWork = math.NaN() },
		"Config.LoneAlpha":           func(c *sim.Config) { c.LoneAlpha = -1 },
		"Config.CacheWork":           func(c *sim.Config) { c.CacheWork = math.Inf(1) },
		"Config.CacheWorkBytes":      func(c *sim.Config) { c.CacheWorkBytes = -4 },
		"Config.CollectiveBytes":     func(c *sim.Config) { c.CacheWorkBytes = 1 << 20 },
		"Config.Intra.SmallBeta":     func(c *sim.Config) { c.Intra.SmallBeta = -1 },
		"Config.Inter.SmallBytes":    func(c *sim.Config) { c.Inter.SmallBytes = -1 },
		"Config.Intra.Alpha":         func(c *sim.Config) { c.Intra.Alpha = -1 },
		"Config.Intra.Beta":          func(c *sim.Config) { c.Intra.Beta = math.NaN() },
		"Config.Inter.Alpha":         func(c *sim.Config) { c.Inter.Alpha = math.Inf(1) },
		"Config.Inter.Beta":          func(c *sim.Config) { c.Inter.Beta = -1e-9 },
		"Config.Gamma":               func(c *sim.Config) { c.Gamma = math.NaN() },
		"Config.SlowFactor":          func(c *sim.Config) { c.SlowRank, c.SlowFactor = 1, -2 },
		"Config.SlowRank":            func(c *sim.Config) { c.SlowRank, c.SlowFactor = 4, 2 },
		"Config.SlowLinks[1]":        func(c *sim.Config) { c.SlowLinks = []sim.SlowLink{{0, 1, 2}, {0, 4, 2}} },
		"Config.SlowLinks[0].Factor": func(c *sim.Config) { c.SlowLinks = []sim.SlowLink{{0, 1, 0}} },
		"Config.Timeout":             func(c *sim.Config) { c.Timeout = -1 },
	} {
		c := ok
		mod(&c)
		_, err := sim.NewWorld(c)
		require.ErrorIs(t, err, transport.ErrInvalid, field)
		require.Contains(t, err.Error(), field)
	}
	w, err := sim.NewWorld(ok)
	require.NoError(t, err)
	require.Equal(t, 4, w.Size())
	require.NoError(t, w.Close())
}
