package zero_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/internal/run/traintest"
	"github.com/ringddp/ringddp/optim"
	"github.com/ringddp/ringddp/zero"
)

// run describes one training run.
type run struct {
	kind, opt string
	ranks     int
	perRank   int
	steps     int
	zero1     bool
	opts      []ddp.Option
	algo      allreduce.Algorithm
	// resume state, if set: parameter values (creation order) and the
	// full optimizer state to start from, and the first step's index.
	startParams [][]float64
	startState  *optim.State
	firstStep   int
	// gatherRoot is the root of the GatherOptimizerState call at the end
	// (ZeRO-1 only).
	gatherRoot int
	// inBackward applies the optimizer bucket by bucket inside Run
	// (ddp.WithOptimizerInBackward).
	inBackward bool
	// buddy wraps with buddies (WrapWithBuddy; with zero1).
	buddy bool
	// runCancelled gives each Run a context of its own, cancelled as soon
	// as Run returns (a caller's per-Run timeout).
	runCancelled bool
}

// result is what every rank ends with.
type result struct {
	params     [][][]float64 // by rank, parameter, element
	fullState  optim.State   // rank 0's full optimizer state
	gathered   []optim.State // by rank: GatherOptimizerState(gatherRoot) (ZeRO-1)
	fullAll    []optim.State // by rank: FullOptimizerState (ZeRO-1)
	stateBytes []int64       // by rank
	sent       []int64       // bytes sent by each rank during the last step
	sentRun    []int64       // of which during Run (the bucket collectives)
	runLog     [][]int64     // by rank: the size of each message sent during the last Run
	gradBytes  int64         // M: gradient bytes per step
	buckets    [][2]int      // the arena's buckets
	pieces     [][]zero.Piece
	// grads is, by rank, the last step's averaged gradient: the gradient
	// arena (DDP), the shard's gradient (ZeRO-1).
	grads [][]float64
	// own and copies are, by rank, the shard's optimizer state and the
	// buddy copy of the left's (ZeRO-1 with buddies).
	own, copies []optim.State
}

// countingConn counts the payload bytes a rank sends, and logs the size of
// each message.
type countingConn struct {
	transport.Conn
	sent atomic.Int64
	mu   sync.Mutex
	log  []int64
}

func (c *countingConn) count(n int) {
	c.sent.Add(int64(n))
	c.mu.Lock()
	c.log = append(c.log, int64(n))
	c.mu.Unlock()
}

// takeLog returns the sizes logged since the last call.
func (c *countingConn) takeLog() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.log
	c.log = nil
	return l
}

func (c *countingConn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	c.count(len(p))
	return c.Conn.Send(ctx, to, h, p)
}

func (c *countingConn) Exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	c.count(len(sp))
	return c.Conn.(transport.Exchanger).Exchange(ctx, to, sh, sp, from, rh, n, sink)
}

func (c *countingConn) Abort(cause error) { c.Conn.(transport.Aborter).Abort(cause) }

func train(t *testing.T, r run) result {
	t.Helper()
	inner, _, err := allreducetest.InprocConns(r.ranks, 20*time.Second)
	require.NoError(t, err)
	counters := make([]*countingConn, r.ranks)
	conns := make([]transport.Conn, r.ranks)
	for i := range conns {
		counters[i] = &countingConn{Conn: inner[i]}
		conns[i] = counters[i]
	}
	res := result{params: make([][][]float64, r.ranks), stateBytes: make([]int64, r.ranks), sent: make([]int64, r.ranks),
		sentRun: make([]int64, r.ranks), runLog: make([][]int64, r.ranks), gathered: make([]optim.State, r.ranks), fullAll: make([]optim.State, r.ranks),
		pieces: make([][]zero.Piece, r.ranks), grads: make([][]float64, r.ranks),
		own: make([]optim.State, r.ranks), copies: make([]optim.State, r.ranks)}
	errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
		ctx := context.Background()
		rank := g.Rank()
		opt := traintest.NewOpt[float64](t, r.opt)
		opts := r.opts
		if r.inBackward {
			opts = append(opts[:len(opts):len(opts)], ddp.WithOptimizerInBackward[float64](opt.(optim.Ranged[float64])))
		}
		var z *zero.ZeRO1[float64]
		var d *ddp.DDP[float64]
		n := traintest.Build[float64](t, r.kind, r.perRank, func(params G.Nodes) traintest.Wrapper {
			var err error
			if r.buddy {
				z, err = zero.WrapWithBuddy[float64](ctx, g, params, opt, traintest.NewOpt[float64](t, r.opt), opts...)
				require.NoError(t, err)
				d = z.DDP()
				return z
			}
			if r.zero1 {
				z, err = zero.Wrap[float64](ctx, g, params, opt, opts...)
				require.NoError(t, err)
				d = z.DDP()
				return z
			}
			d, err = ddp.Wrap[float64](ctx, g, params, opts...)
			require.NoError(t, err)
			return d
		})
		if r.startParams != nil {
			for i := range n.Params {
				lo, hi := d.Offset(i)
				copy(d.ParamArena()[lo:hi], r.startParams[i])
			}
		}
		if r.startState != nil {
			if z != nil {
				require.NoError(t, z.LoadFullOptimizerState(*r.startState))
			} else {
				require.NoError(t, opt.LoadState(*r.startState))
			}
		}
		for s := r.firstStep; s < r.firstStep+r.steps; s++ {
			x, y := traintest.BatchData[float64](s, r.ranks*r.perRank)
			xr, yr := traintest.Rows(x, y, rank, r.perRank)
			traintest.SetInput(t, n, xr, yr)
			before := counters[rank].sent.Load()
			counters[rank].takeLog()
			runCtx, cancel := ctx, context.CancelFunc(func() {})
			if r.runCancelled {
				runCtx, cancel = context.WithCancel(ctx)
			}
			err := d.Run(runCtx, n.VM)
			cancel()
			if err != nil {
				return err
			}
			res.sentRun[rank] = counters[rank].sent.Load() - before
			res.runLog[rank] = counters[rank].takeLog()
			if z != nil {
				if err := z.Step(ctx); err != nil {
					return err
				}
			} else if err := d.Step(ctx, opt); err != nil {
				return err
			}
			if err := d.CheckReplicas(ctx); err != nil {
				return fmt.Errorf("step %d: %w", s, err)
			}
			// Less the replica check's all-gather of one int64 per rank.
			res.sent[rank] = counters[rank].sent.Load() - before - 8*int64(g.Size()-1)
		}
		res.params[rank] = traintest.ParamValues[float64](n)
		res.stateBytes[rank] = opt.StateBytes()
		if rank == 0 {
			res.gradBytes = int64(len(d.GradArena())) * 8
			res.buckets = d.BucketRanges()
		}
		res.grads[rank] = append([]float64(nil), d.GradArena()...)
		if r.buddy {
			_, copied, err := z.BuddyState()
			if err != nil {
				return err
			}
			res.own[rank], res.copies[rank] = opt.State(), copied
		}
		if z != nil {
			res.grads[rank] = append([]float64(nil), z.GradShard()...)
			res.pieces[rank] = z.Pieces()
			full, err := z.FullOptimizerState(ctx)
			if err != nil {
				return err
			}
			res.fullAll[rank] = full
			if rank == 0 {
				res.fullState = full
			}
			if res.gathered[rank], err = z.GatherOptimizerState(ctx, r.gatherRoot); err != nil {
				return err
			}
		} else if rank == 0 {
			res.fullState = opt.State()
		}
		return nil
	}, allreduce.WithAlgorithm(r.algo))
	require.NoError(t, allreducetest.FirstError(errs))
	return res
}

func maxRelDiff(a, b [][]float64) float64 {
	worst := 0.0
	for i := range a {
		scale, diff := 0.0, 0.0
		for j := range a[i] {
			scale = math.Max(scale, math.Abs(a[i][j]))
			diff = math.Max(diff, math.Abs(a[i][j]-b[i][j]))
		}
		if scale > 0 {
			worst = math.Max(worst, diff/scale)
		}
	}
	return worst
}

// referenceRun trains one process, without ddp or any collective, on the
// global batch of ranks·perRank rows, and returns each parameter's values.
func referenceRun(t *testing.T, kind, optName string, ranks, perRank, steps int) [][]float64 {
	rows := ranks * perRank
	n := traintest.Build[float64](t, kind, rows, nil)
	opt := traintest.NewOpt[float64](t, optName)
	var flatP, flatG []float64
	for s := 0; s < steps; s++ {
		x, y := traintest.BatchData[float64](s, rows)
		traintest.SetInput(t, n, x, y)
		n.VM.Reset()
		require.NoError(t, n.VM.RunAll())
		flatP, flatG = flatP[:0], flatG[:0]
		for i, p := range n.Params {
			flatP = append(flatP, p.Value().Data().([]float64)...)
			flatG = append(flatG, n.Grads[i].Value().Data().([]float64)...)
		}
		require.NoError(t, opt.Step(flatP, flatG))
		off := 0
		for _, p := range n.Params {
			data := p.Value().Data().([]float64)
			off += copy(data, flatP[off:off+len(data)])
		}
	}
	return traintest.ParamValues[float64](n)
}

// The bucket layouts of "mlp-odd" (parameters of 5488, 7, 70 and 10
// elements; the arena holds them in reverse order, 5575 elements):
//   - one: a single bucket over the arena;
//   - small: [0, 87) and [87, 5575). Under contiguous shards the first lay
//     inside rank 0's shard and the second spanned every shard;
//   - per-param: buckets of 10, 70, 7 and 5488 elements: with 8 ranks the
//     7-element bucket leaves rank 7 an empty piece.
var bucketLayouts = []struct {
	name string
	opt  ddp.Option
}{
	{"one", ddp.WithBucketBytes(1<<30, 1<<30)},
	{"small", ddp.WithBucketBytes(4<<10, 16<<10)},
	{"per-param", ddp.WithBucketBytes(8, 8)},
}

// Each bucket's reduce-scatter uses the chunks and the reduction order of
// the ring all-reduce of the same bucket, and the optimizer is element-wise:
// ZeRO-1 ends bitwise equal to DDP over allreduce.Ring, whatever the
// buckets and the number of ranks.
func TestZeRO1BitwiseMatchesDDPRing(t *testing.T) {
	steps := 20
	if testing.Short() {
		steps = 5
	}
	for _, opt := range []string{"sgd", "adam", "adamw"} {
		for _, layout := range bucketLayouts {
			for _, ranks := range []int{1, 2, 3, 4, 5, 8} {
				t.Run(fmt.Sprintf("%s/buckets=%s/ranks=%d", opt, layout.name, ranks), func(t *testing.T) {
					base := run{kind: "mlp-odd", opt: opt, ranks: ranks, perRank: 2, steps: steps,
						opts: []ddp.Option{layout.opt}, algo: allreduce.Ring}
					want := train(t, base)
					z := base
					z.zero1 = true
					got := train(t, z)
					require.Equal(t, want.params, got.params)
					require.Equal(t, want.fullState, got.fullState, "ZeRO-1's gathered optimizer state is DDP's")
					for r := range got.grads {
						var shard []float64
						for _, p := range got.pieces[r] {
							shard = append(shard, want.grads[r][p.Lo:p.Hi]...)
						}
						require.Equal(t, shard, got.grads[r], "rank %d: GradShard is DDP's averaged gradient at the pieces", r)
					}
				})
			}
		}
	}
}

// Against a single process on the global batch (no collective at all), and
// with the group's default algorithm (direct for in-process ranks: DDP sums
// in rank order, ZeRO-1's reduce-scatter around the ring), within rounding.
func TestZeRO1MatchesSingleProcess(t *testing.T) {
	const steps = 10
	for _, opt := range []string{"sgd", "adam"} {
		for _, ranks := range []int{1, 3, 4, 5} {
			t.Run(fmt.Sprintf("%s/ranks=%d", opt, ranks), func(t *testing.T) {
				want := referenceRun(t, "mlp-odd", opt, ranks, 2, steps)
				for _, layout := range bucketLayouts {
					for _, zero1 := range []bool{false, true} {
						got := train(t, run{kind: "mlp-odd", opt: opt, ranks: ranks, perRank: 2, steps: steps,
							opts: []ddp.Option{layout.opt}, zero1: zero1, algo: allreduce.Auto})
						for r := range got.params {
							require.LessOrEqual(t, maxRelDiff(want, got.params[r]), 1e-10, "buckets %s, zero1 %v, rank %d", layout.name, zero1, r)
						}
					}
				}
			})
		}
	}
}

func TestPieces(t *testing.T) {
	// Buckets of 5, 1 and 10 elements over 3 ranks: chunks of 2,2,1 / 1,0,0
	// / 4,3,3 (ChunkBounds gives the remainder to the first chunks).
	buckets := [][2]int{{0, 5}, {5, 6}, {6, 16}}
	want := [][]zero.Piece{
		{{Lo: 0, Hi: 2, Off: 0}, {Lo: 5, Hi: 6, Off: 2}, {Lo: 6, Hi: 10, Off: 3}},
		{{Lo: 2, Hi: 4, Off: 0}, {Lo: 6, Hi: 6, Off: 2}, {Lo: 10, Hi: 13, Off: 2}},
		{{Lo: 4, Hi: 5, Off: 0}, {Lo: 6, Hi: 6, Off: 1}, {Lo: 13, Hi: 16, Off: 1}},
	}
	for r := range want {
		got, err := zero.Pieces(buckets, 16, 3, r)
		require.NoError(t, err)
		require.Equal(t, want[r], got, "rank %d", r)
	}
	got, err := zero.Pieces(buckets, 16, 1, 0)
	require.NoError(t, err)
	require.Equal(t, []zero.Piece{{0, 5, 0}, {5, 6, 5}, {6, 16, 6}}, got, "one rank: the whole arena")

	for _, bad := range []struct {
		buckets [][2]int
		total   int
	}{
		{[][2]int{{0, 5}, {6, 16}}, 16}, // a gap
		{[][2]int{{0, 5}, {4, 16}}, 16}, // an overlap
		{[][2]int{{0, 5}, {5, 15}}, 16}, // short of the arena
		{[][2]int{{1, 16}}, 16},         // not from 0
	} {
		_, err := zero.Pieces(bad.buckets, bad.total, 3, 0)
		require.Error(t, err, "%v", bad.buckets)
	}
	_, err = zero.Pieces(buckets, 16, 3, 3)
	require.Error(t, err)
}

// Per step, rank r sends every chunk of each bucket but its own in the
// reduce-scatter and every chunk but rank r+1's in the all-gather: no rank
// sends more than ⌈M_b/N⌉·(N-1) elements of a bucket in either, however the
// buckets fall. Totals are DDP's 2(N-1)·M; the optimizer state is 1/N.
func TestZeRO1MemoryAndWireBytes(t *testing.T) {
	for _, layout := range bucketLayouts {
		for _, ranks := range []int{1, 2, 3, 4, 5} {
			t.Run(fmt.Sprintf("buckets=%s/ranks=%d", layout.name, ranks), func(t *testing.T) {
				base := run{kind: "mlp-odd", opt: "adam", ranks: ranks, perRank: 2, steps: 2, algo: allreduce.Ring,
					opts: []ddp.Option{layout.opt}}
				d := train(t, base)
				z := base
				z.zero1 = true
				got := train(t, z)
				elements := int(d.gradBytes / 8)
				var total, sentDDP, sentZeRO int64
				for r := 0; r < ranks; r++ {
					var shard, wantRS, wantAG, maxShare int64
					require.Len(t, got.pieces[r], len(got.buckets))
					for i, b := range got.buckets {
						m := b[1] - b[0]
						lo, hi := allreduce.ChunkBounds(m, ranks, r)
						require.Equal(t, zero.Piece{Lo: b[0] + lo, Hi: b[0] + hi, Off: int(shard)}, got.pieces[r][i], "rank %d, bucket %d", r, i)
						nlo, nhi := allreduce.ChunkBounds(m, ranks, (r+1)%ranks)
						shard += int64(hi - lo)
						if ranks > 1 {
							wantRS += int64(m - (hi - lo))
							wantAG += int64(m - (nhi - nlo))
						}
						maxShare += int64((m + ranks - 1) / ranks * (ranks - 1))
					}
					require.Equal(t, wantRS*8, got.sentRun[r], "rank %d: reduce-scatter bytes", r)
					require.Equal(t, wantAG*8, got.sent[r]-got.sentRun[r], "rank %d: all-gather bytes", r)
					require.LessOrEqual(t, got.sentRun[r], maxShare*8, "rank %d sends more than its share", r)
					// Adam holds two float64 buffers per element of its shard,
					// within one element per bucket of 1/N of the arena.
					require.Equal(t, shard*2*8, got.stateBytes[r], "rank %d", r)
					require.InDelta(t, float64(elements)/float64(ranks), float64(shard), float64(len(got.buckets)), "rank %d", r)
					require.Equal(t, d.stateBytes[0], d.stateBytes[r])
					total += got.stateBytes[r]
					sentDDP += d.sent[r]
					sentZeRO += got.sent[r]
				}
				require.Equal(t, d.stateBytes[0], total, "shards add up to DDP's state")
				// The critical path of the reduce-scatters: every ring step
				// lasts as long as its largest message, and every rank sends
				// one message per step. With every bucket split evenly it is
				// (N-1)·⌈M_b/N⌉ per bucket, DDP's reduce-scatter half; a
				// bucket inside one contiguous shard took (N-1)·M_b.
				if ranks > 1 {
					var critical, want int64
					for i := range got.runLog[0] {
						var longest int64
						for r := 0; r < ranks; r++ {
							require.Len(t, got.runLog[r], len(got.runLog[0]), "rank %d: messages", r)
							longest = max(longest, got.runLog[r][i])
						}
						critical += longest
					}
					for _, b := range got.buckets {
						m := b[1] - b[0]
						want += int64((ranks - 1) * ((m + ranks - 1) / ranks) * 8)
					}
					require.Equal(t, want, critical, "critical path of the reduce-scatters, bytes")
				}
				want := 2 * int64(ranks-1) * d.gradBytes // 2(N-1)/N·M per rank, N ranks
				require.Equal(t, want, sentDDP, "DDP bytes on the wire per step")
				require.Equal(t, want, sentZeRO, "ZeRO-1 bytes on the wire per step")
			})
		}
	}
}

// A checkpoint (parameters + full optimizer state) taken after k steps
// resumes under ZeRO-1 or DDP and under another world size at the same
// global batch, and ends where the uninterrupted run ends.
func TestResumeAcrossModesAndWorldSizes(t *testing.T) {
	const global, k, m = 60, 4, 4
	uninterrupted := train(t, run{kind: "mlp-odd", opt: "adam", ranks: 4, perRank: global / 4, steps: k + m, zero1: true})
	// As a checkpoint writer would: the state gathered onto rank 0 only.
	first := train(t, run{kind: "mlp-odd", opt: "adam", ranks: 4, perRank: global / 4, steps: k, zero1: true,
		opts: []ddp.Option{ddp.WithBucketBytes(4<<10, 16<<10)}})
	for _, next := range []struct {
		ranks int
		zero1 bool
	}{{4, false}, {3, true}, {2, true}, {3, false}, {1, true}, {5, true}} {
		t.Run(fmt.Sprintf("zero1→ranks=%d/zero1=%v", next.ranks, next.zero1), func(t *testing.T) {
			st := first.gathered[0]
			got := train(t, run{kind: "mlp-odd", opt: "adam", ranks: next.ranks, perRank: global / next.ranks, steps: m,
				zero1: next.zero1, startParams: first.params[0], startState: &st, firstStep: k})
			require.LessOrEqual(t, maxRelDiff(uninterrupted.params[0], got.params[0]), 1e-10)
		})
	}
	t.Run("ddp→zero1", func(t *testing.T) {
		ddpFirst := train(t, run{kind: "mlp-odd", opt: "adam", ranks: 4, perRank: global / 4, steps: k})
		st := ddpFirst.fullState
		got := train(t, run{kind: "mlp-odd", opt: "adam", ranks: 3, perRank: global / 3, steps: m,
			zero1: true, startParams: ddpFirst.params[0], startState: &st, firstStep: k,
			opts: []ddp.Option{ddp.WithBucketBytes(8, 8)}})
		require.LessOrEqual(t, maxRelDiff(uninterrupted.params[0], got.params[0]), 1e-10)
	})
}
