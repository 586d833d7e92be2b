package heal_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/heal"
	"github.com/ringddp/ringddp/optim"
)

// replica is the state every sender holds: params parameters, an Adam-like
// optimizer state of buffers buffers (0: before the first step), RNG bytes.
func replica[T heal.Float](params, buffers, rng int) heal.State[T] {
	r := rand.New(rand.NewPCG(uint64(params), uint64(buffers)))
	st := heal.State[T]{JobID: "job-1", RunID: "run-a", Position: heal.Position{Epoch: 2, StepInEpoch: 17, GlobalStep: 517, LossSum: 12.375, LossSteps: 17}}
	st.Params = make([]T, params)
	for i := range st.Params {
		st.Params[i] = T(r.NormFloat64())
	}
	st.Optim = optim.State{Optimizer: "adam", DType: optim.DTypeFloat32, Hyper: []optim.Hyper{{Name: "lr", Value: 1e-3}, {Name: "beta1", Value: 0.9}}}
	if buffers > 0 {
		st.Optim.Step, st.Optim.Len = 517, params
		for k := range buffers {
			d := make([]float64, params)
			for i := range d {
				d[i] = float64(float32(r.Float64()))
			}
			st.Optim.Buffers = append(st.Optim.Buffers, optim.Buffer{Name: fmt.Sprintf("buf%d", k), Data: d})
		}
	}
	st.RNG = make([]byte, rng)
	for i := range st.RNG {
		st.RNG[i] = byte(r.Uint32())
	}
	return st
}

// fresh is a joiner's state before Heal: its identity, its arena (zeros)
// and its optimizer's kind.
func fresh[T heal.Float](params int, opt string) heal.State[T] {
	return heal.State[T]{JobID: "job-1", RunID: "run-a", Params: make([]T, params), Optim: optim.State{Optimizer: opt, DType: optim.DTypeFloat32}}
}

type outcome[T heal.Float] struct {
	states  []heal.State[T]
	reports []heal.Report
	errs    []error
}

// healAll runs Heal on n inproc ranks; state(r) is rank r's state and
// opts(r) its options.
func healAll[T heal.Float](t *testing.T, n int, joiners []int, timeout time.Duration, state func(r int) heal.State[T], opts func(r int) []heal.Option) outcome[T] {
	t.Helper()
	conns, _, err := allreducetest.InprocConns(n, timeout)
	require.NoError(t, err)
	o := outcome[T]{states: make([]heal.State[T], n), reports: make([]heal.Report, n)}
	for r := range n {
		o.states[r] = state(r)
	}
	o.errs = allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		var op []heal.Option
		if opts != nil {
			op = opts(g.Rank())
		}
		rep, err := heal.Heal(context.Background(), g, joiners, &o.states[g.Rank()], op...)
		o.reports[g.Rank()] = rep
		return err
	})
	return o
}

func isIn(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// 2-5 ranks, 1 or 2 joiners, odd sizes, several segments per stripe, a
// 0-element optimizer state, and none (ZeRO-1): every joiner ends with the
// senders' state, bitwise, and each sender sent its share.
func TestHeal(t *testing.T) {
	type shape struct{ params, buffers, rng int }
	shapes := []shape{{1001, 2, 37}, {7, 1, 0}, {3, 0, 5}}
	for n := 2; n <= 5; n++ {
		for nj := 1; nj <= 2 && nj < n; nj++ {
			for si, sh := range shapes {
				joiners := []int{(n - 1 + si) % n}
				if nj == 2 {
					joiners = append(joiners, (1+si)%n)
					if joiners[1] == joiners[0] {
						joiners[1] = (joiners[0] + 1) % n
					}
				}
				t.Run(fmt.Sprintf("n=%d/joiners=%v/params=%d/buffers=%d", n, joiners, sh.params, sh.buffers), func(t *testing.T) {
					want := replica[float32](sh.params, sh.buffers, sh.rng)
					o := healAll(t, n, joiners, 10*time.Second, func(r int) heal.State[float32] {
						if isIn(joiners, r) {
							return fresh[float32](sh.params, "adam")
						}
						return replica[float32](sh.params, sh.buffers, sh.rng)
					}, func(int) []heal.Option { return []heal.Option{heal.WithSegment(17)} })
					require.NoError(t, allreducetest.FirstError(o.errs))
					rep := o.reports[0]
					for r := range n {
						require.Equal(t, want, o.states[r], "rank %d", r)
						got := o.reports[r]
						require.Positive(t, got.Duration)
						got.Duration = rep.Duration
						require.Equal(t, rep, got, "rank %d's report", r)
					}
					require.ElementsMatch(t, joiners, rep.Joiners)
					require.Len(t, rep.Senders, n-len(joiners))
					// Each sender sends its stripe, ⌊W/m⌋ or ⌈W/m⌉ words of the
					// stream's W; the first also the header.
					words := (rep.StateBytes + 7) / 8
					m := int64(len(rep.Senders))
					for i, s := range rep.Senders {
						require.GreaterOrEqual(t, rep.Sent[s], words/m*8, "sender %d", s)
						require.LessOrEqual(t, rep.Sent[s], (words+m-1)/m*8+maxHeader(i), "sender %d sends about 1/%d of the state", s, m)
					}
					for _, j := range joiners {
						require.Zero(t, rep.Sent[j])
					}
				})
			}
		}
	}
}

// maxHeader bounds the header's bytes, sent by the first sender.
func maxHeader(i int) int64 {
	if i == 0 {
		return 1024
	}
	return 0
}

// Under ZeRO-1 the optimizer state is not sent (package zero re-shards
// it): the joiner gets the rest.
func TestHealWithoutOptimizer(t *testing.T) {
	want := replica[float64](501, 0, 9)
	want.Optim = optim.State{}
	o := healAll(t, 3, []int{1}, 10*time.Second, func(r int) heal.State[float64] {
		if r == 1 {
			return fresh[float64](501, "")
		}
		return want
	}, nil)
	require.NoError(t, allreducetest.FirstError(o.errs))
	require.Equal(t, want.Params, o.states[1].Params)
	require.Equal(t, want.Position, o.states[1].Position)
	require.Equal(t, want.RNG, o.states[1].RNG)
}

// A stripe damaged on the wire: every rank names the stripe and its
// sender, and the joiner loads nothing.
func TestHealCorruptStripe(t *testing.T) {
	o := healAll(t, 4, []int{3}, 10*time.Second, func(r int) heal.State[float32] {
		if r == 3 {
			return fresh[float32](1001, "adam")
		}
		return replica[float32](1001, 2, 37)
	}, func(r int) []heal.Option {
		if r == 1 {
			return []heal.Option{heal.WithCorruption(func(stripe int, p []byte) { p[len(p)/2] ^= 0x10 })}
		}
		return nil
	})
	t.Logf("sender 1: %v", o.errs[1])
	for r, err := range o.errs {
		require.ErrorContains(t, err, "rank 3 (joining) refused the state: stripe 1 of 3, sent by rank 1, failed its SHA-256 check; nothing was loaded", "rank %d", r)
	}
	require.Equal(t, make([]float32, 1001), o.states[3].Params, "the joiner loaded nothing")
	require.Nil(t, o.states[3].Optim.Buffers)
}

// A sender that dies mid-stripe: every rank returns an error within the
// transport's timeout, none hangs.
func TestHealSenderDies(t *testing.T) {
	const timeout = 2 * time.Second
	conns, _, err := allreducetest.InprocConns(4, timeout)
	require.NoError(t, err)
	states := make([]heal.State[float32], 4)
	for r := range states {
		states[r] = replica[float32](4001, 2, 0)
	}
	states[0] = fresh[float32](4001, "adam")
	start := time.Now()
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		var opts []heal.Option
		if g.Rank() == 2 {
			segments := 0
			opts = append(opts, heal.WithCorruption(func(int, []byte) {
				if segments++; segments == 2 {
					_ = g.Conn().Close() // dies: its connections close as a killed process's would
				}
			}))
		}
		_, err := heal.Heal(context.Background(), g, []int{0}, &states[g.Rank()], append(opts, heal.WithSegment(100))...)
		return err
	})
	took := time.Since(start)
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		t.Logf("rank %d, after %v: %v", r, took, err)
	}
	require.ErrorContains(t, errs[0], "from rank 2")
	require.Less(t, took, timeout+3*time.Second, "no rank waits past the timeout")
	require.Equal(t, make([]float32, 4001), states[0].Params, "the joiner loaded nothing")
}

// Another job's or attempt's rank, another model, another optimizer, and
// senders whose states differ: refused on every rank, naming what differs.
func TestHealRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		state func(r int) heal.State[float32]
		want  string
	}{
		{"job", func(r int) heal.State[float32] {
			if r == 2 {
				s := fresh[float32](99, "adam")
				s.JobID = "job-other"
				return s
			}
			return replica[float32](99, 2, 3)
		}, `rank 2 (joining) is of job "job-other", run "run-a"; rank 0's of job "job-1", run "run-a": refused, it belongs to another job or attempt`},
		{"run", func(r int) heal.State[float32] {
			if r == 2 {
				s := fresh[float32](99, "adam")
				s.RunID = "run-b"
				return s
			}
			return replica[float32](99, 2, 3)
		}, `rank 2 (joining) is of job "job-1", run "run-b"`},
		{"params", func(r int) heal.State[float32] {
			if r == 2 {
				return fresh[float32](98, "adam")
			}
			return replica[float32](99, 2, 3)
		}, "rank 2 (joining) has 98 parameters of 4 bytes, rank 0 99 of 4 bytes: refused, the state's shape differs"},
		{"optimizer", func(r int) heal.State[float32] {
			if r == 2 {
				return fresh[float32](99, "sgd")
			}
			return replica[float32](99, 2, 3)
		}, `rank 2 (joining) has optimizer "sgd/float32", rank 0 "adam/float32"`},
		{"diverged header", func(r int) heal.State[float32] {
			if r == 2 {
				return fresh[float32](99, "adam")
			}
			s := replica[float32](99, 2, 3)
			s.GlobalStep += int64(r)
			return s
		}, "the senders' states differ: rank 1's header"},
		{"diverged parameters", func(r int) heal.State[float32] {
			if r == 2 {
				return fresh[float32](99, "adam")
			}
			s := replica[float32](99, 2, 3)
			s.Params[5] += float32(r)
			return s
		}, "replica check failed: rank 1's parameters are not bitwise rank 0's"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := healAll(t, 3, []int{2}, 10*time.Second, c.state, nil)
			for r, err := range o.errs {
				require.ErrorContains(t, err, c.want, "rank %d", r)
			}
			t.Logf("joiner: %v", o.errs[2])
		})
	}
}

// countingConn counts the payload bytes a rank sends.
type countingConn struct {
	transport.Conn
	sent atomic.Int64
}

func (c *countingConn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	c.sent.Add(int64(len(p)))
	return c.Conn.Send(ctx, to, h, p)
}

func (c *countingConn) Exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	c.sent.Add(int64(len(sp)))
	return c.Conn.(transport.Exchanger).Exchange(ctx, to, sh, sp, from, rh, n, sink)
}

func (c *countingConn) Abort(cause error) { c.Conn.(transport.Aborter).Abort(cause) }

// On the wire, counted by the transport: each of the 4 senders sends its
// stripe, 1/4 of the state, and a joiner almost nothing; the rest is the
// small collectives of steps 1, 2 and 4 and the Splits.
func TestHealWireBytes(t *testing.T) {
	const n, params = 5, 20001
	inner, _, err := allreducetest.InprocConns(n, 10*time.Second)
	require.NoError(t, err)
	counters := make([]*countingConn, n)
	conns := make([]transport.Conn, n)
	for r := range conns {
		counters[r] = &countingConn{Conn: inner[r]}
		conns[r] = counters[r]
	}
	states := make([]heal.State[float32], n)
	for r := range states {
		states[r] = replica[float32](params, 2, 11)
	}
	states[2] = fresh[float32](params, "adam")
	reports := make([]heal.Report, n)
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		var err error
		reports[g.Rank()], err = heal.Heal(context.Background(), g, []int{2}, &states[g.Rank()])
		return err
	})
	require.NoError(t, allreducetest.FirstError(errs))
	stateBytes := int64(params*4 + 2*params*8 + 11)
	require.Equal(t, stateBytes, reports[0].StateBytes)
	const small = 8 << 10 // the small collectives: descriptors, header, verdict, Splits
	for r, c := range counters {
		sent := c.sent.Load()
		t.Logf("rank %d sent %d bytes on the wire (state %d bytes)", r, sent, stateBytes)
		if r == 2 {
			require.Less(t, sent, int64(small), "the joiner")
			continue
		}
		require.GreaterOrEqual(t, sent, stateBytes/4, "rank %d", r)
		require.Less(t, sent, stateBytes/4+small, "rank %d sends 1/4 of the state", r)
	}
}
