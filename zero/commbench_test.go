package zero_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/reference"
)

// issueBuckets is the bucket layout ddp makes for MLP 784-2048-2048-10
// with -bucket-mb 2 (float32; 1 MiB first bucket): b2+W2+b1, W1, b0, W0 in
// reverse creation order, 5 824 522 elements (22.2 MiB).
var issueBuckets = [][2]int{{0, 22538}, {22538, 4216842}, {4216842, 4218890}, {4218890, 5824522}}

// commStrategy is one way to run a step's gradient and parameter
// collectives over the issue's buckets.
type commStrategy struct {
	name string
	run  func(ctx context.Context, g *allreduce.Group, grads, params []float32) error
}

// contiguous is the shard layout before the change: ChunkBounds over the
// whole arena.
func contiguous(g *allreduce.Group, total, lo, hi int) (counts []int, mlo, mhi, owner int) {
	n := g.Size()
	counts = make([]int, n)
	owner = -1
	for q := range counts {
		slo, shi := allreduce.ChunkBounds(total, n, q)
		counts[q] = max(0, min(hi, shi)-max(lo, slo))
		if counts[q] == hi-lo {
			owner = q
		}
		if q == g.Rank() {
			mlo = min(max(lo, slo), hi)
			mhi = max(min(hi, shi), mlo)
		}
	}
	return counts, mlo, mhi, owner
}

var commStrategies = []commStrategy{
	{"ddp-allreduce", func(ctx context.Context, g *allreduce.Group, grads, _ []float32) error {
		for _, b := range issueBuckets {
			if err := allreduce.AllReduce(ctx, g, grads[b[0]:b[1]], allreduce.Avg); err != nil {
				return err
			}
		}
		return nil
	}},
	// Before: every bucket reduce-scattered over the whole ring with the
	// contiguous shards' counts, then one all-gather of the arena.
	{"zero-contiguous-rsv", func(ctx context.Context, g *allreduce.Group, grads, params []float32) error {
		for _, b := range issueBuckets {
			counts, mlo, mhi, _ := contiguous(g, len(grads), b[0], b[1])
			if err := allreduce.ReduceScatterV(ctx, g, grads[mlo:mhi], grads[b[0]:b[1]], counts, allreduce.Avg); err != nil {
				return err
			}
		}
		lo, hi := allreduce.ChunkBounds(len(params), g.Size(), g.Rank())
		return allreduce.AllGather(ctx, g, params, params[lo:hi])
	}},
	// The alternative kept contiguous: a bucket inside one shard reduced
	// to its owner, the others as before.
	{"zero-contiguous-reduce", func(ctx context.Context, g *allreduce.Group, grads, params []float32) error {
		for _, b := range issueBuckets {
			counts, mlo, mhi, owner := contiguous(g, len(grads), b[0], b[1])
			var err error
			if owner >= 0 {
				err = allreduce.Reduce(ctx, g, grads[b[0]:b[1]], allreduce.Avg, owner)
			} else {
				err = allreduce.ReduceScatterV(ctx, g, grads[mlo:mhi], grads[b[0]:b[1]], counts, allreduce.Avg)
			}
			if err != nil {
				return err
			}
		}
		lo, hi := allreduce.ChunkBounds(len(params), g.Size(), g.Rank())
		return allreduce.AllGather(ctx, g, params, params[lo:hi])
	}},
	// After: every bucket split evenly (zero.Wrap's layout).
	{"zero-even", func(ctx context.Context, g *allreduce.Group, grads, params []float32) error {
		for _, b := range issueBuckets {
			lo, hi := allreduce.ChunkBounds(b[1]-b[0], g.Size(), g.Rank())
			if err := allreduce.ReduceScatter(ctx, g, grads[b[0]+lo:b[0]+hi], grads[b[0]:b[1]], allreduce.Avg); err != nil {
				return err
			}
		}
		for _, b := range issueBuckets {
			lo, hi := allreduce.ChunkBounds(b[1]-b[0], g.Size(), g.Rank())
			if err := allreduce.AllGather(ctx, g, params[b[0]:b[1]], params[b[0]+lo:b[0]+hi]); err != nil {
				return err
			}
		}
		return nil
	}},
}

// BenchmarkBucketCollectives times one step's communication alone (no
// model): the gradient buckets' collectives and, for ZeRO-1, the
// parameter all-gather, on 4 ranks in process (inproc), over loopback TCP
// (goroutine ranks), and in process with a modelled 250 MB/s link out of
// every rank (link: time passes without using a core, so the links run in
// parallel as a network's do, however few cores the machine has). ns/op is
// rank 0's time per step.
func BenchmarkBucketCollectives(b *testing.B) {
	const ranks = 4
	total := issueBuckets[len(issueBuckets)-1][1]
	for _, tr := range []string{"inproc", "tcp", "link"} {
		for _, s := range commStrategies {
			b.Run(fmt.Sprintf("transport=%s/%s", tr, s.name), func(b *testing.B) {
				conns := benchConns(b, tr, ranks)
				iters := b.N
				errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
					ctx := context.Background()
					grads := reference.Input[float32](1, g.Rank(), total, allreduce.Sum)
					params := make([]float32, total)
					if err := s.run(ctx, g, grads, params); err != nil { // warm-up
						return err
					}
					if err := allreduce.Barrier(ctx, g); err != nil {
						return err
					}
					if g.Rank() == 0 {
						b.ResetTimer()
					}
					for i := 0; i < iters; i++ {
						if err := s.run(ctx, g, grads, params); err != nil {
							return err
						}
					}
					return allreduce.Barrier(ctx, g)
				})
				b.StopTimer()
				require.NoError(b, allreducetest.FirstError(errs))
			})
		}
	}
}

func benchConns(b testing.TB, tr string, n int) []transport.Conn {
	switch tr {
	case "inproc":
		conns, _, err := allreducetest.InprocConns(n, time.Minute)
		require.NoError(b, err)
		return conns
	case "link":
		conns, _, err := allreducetest.InprocConns(n, time.Minute)
		require.NoError(b, err)
		for r, c := range conns {
			conns[r] = &linkConn{Conn: c, bytesPerSec: 250e6}
		}
		return conns
	}
	store := rendezvous.NewMemStore()
	conns := make([]transport.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tcp.Dial(context.Background(), tcp.Config{Rank: r, Size: n, Store: store,
				Secret: []byte("zero bench secret"), Timeout: time.Minute, ConnectTimeout: 20 * time.Second})
			conns[r], errs[r] = c, err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(b, err)
	}
	return conns
}

// linkConn models a rank's outgoing link: a message of n bytes occupies it
// for n/bytesPerSec (a sleep, so the links of all ranks run in parallel
// whatever the number of cores) before it is handed over. It hides the
// in-process transport's shared memory, so DDP takes the ring, as it would
// over a network.
type linkConn struct {
	transport.Conn
	bytesPerSec float64
}

func (c *linkConn) wire(n int) {
	if n > 0 {
		time.Sleep(time.Duration(float64(n) / c.bytesPerSec * float64(time.Second)))
	}
}

func (c *linkConn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	c.wire(len(p))
	return c.Conn.Send(ctx, to, h, p)
}

func (c *linkConn) Exchange(ctx context.Context, to int, sh transport.Header, sp []byte, from int, rh transport.Header, n int, sink transport.Sink) error {
	c.wire(len(sp))
	return c.Conn.(transport.Exchanger).Exchange(ctx, to, sh, sp, from, rh, n, sink)
}

func (c *linkConn) Abort(cause error) { c.Conn.(transport.Aborter).Abort(cause) }
