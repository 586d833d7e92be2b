package allreducetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// What the multi-process transports' tests (tcp, shm) share: the reduced
// matrix's huge cells, the matrix one rank of a multi-process job runs,
// and a rank killed in the middle of an all-reduce.

// ReducedHugeLen is the large length of the reduced matrix: 1 MiB of
// float32, several frames, ring chunks or slots per message.
const ReducedHugeLen = 1<<18 + 3

// ReducedMatrix is the collective matrix (the suite the in-process ranks
// run in full) reduced for a transport between processes, whose ranks
// connect makes: ranks 1..5, lengths {0, 1, N-1, N, N+1, 1000}, {Sum, Max}
// × {float32, int64}, every AllReduce algorithm the transport can run,
// every collective once at ReducedHugeLen on 3 ranks (HugeOnThree); sync,
// async, repeated and aliased, Broadcast and Reduce from every root.
func ReducedMatrix(connect func(tb testing.TB, n int) []transport.Conn) MatrixConfig {
	return MatrixConfig{
		Connect: connect,
		Ranks:   []int{1, 2, 3, 4, 5},
		Ops:     []allreduce.ReduceOp{allreduce.Sum, allreduce.Max},
		DTypes:  []allreduce.DType{allreduce.Float32, allreduce.Int64},
		Huge:    HugeOnThree,
		HugeLen: ReducedHugeLen,
	}
}

// HugeOnThree is the huge cells of a transport between processes: each
// collective, and AllReduce with each algorithm, once at HugeLen on 3
// ranks (Sum, float32); none in short mode.
func HugeOnThree(coll allreduce.Kind, _ allreduce.Algorithm, n int) ([]allreduce.ReduceOp, []allreduce.DType) {
	if n != 3 || testing.Short() {
		return nil, nil
	}
	op := allreduce.Sum
	if coll == allreduce.KindAllGather || coll == allreduce.KindBroadcast {
		op = 0
	}
	return []allreduce.ReduceOp{op}, []allreduce.DType{allreduce.Float32}
}

// RankMatrix is one rank's part of the reduced matrix over separate
// processes: for every algorithm conn can run, AllReduce of each length
// with every op on float32 and int64 (but Avg), each result compared bit
// for bit with the sequential reference (every rank computes it from
// every rank's deterministic input); then after(g), if not nil. It
// returns the algorithms it ran. In the race subset (Thin) lengths over
// 1000 run one of those cells each, rotating with the algorithm and the
// length.
func RankMatrix(ctx context.Context, conn transport.Conn, lengths []int, after func(g *allreduce.Group) error) ([]allreduce.Algorithm, error) {
	algos := AlgorithmsFor(conn)
	n := conn.Size()
	type cell struct {
		op  allreduce.ReduceOp
		f32 bool
	}
	var cells []cell
	for _, op := range AllOps {
		cells = append(cells, cell{op, true})
		if op != allreduce.Avg {
			cells = append(cells, cell{op, false})
		}
	}
	for a, algo := range algos {
		g, err := allreduce.NewGroup(conn, allreduce.WithAlgorithm(algo))
		if err != nil {
			return nil, err
		}
		for l, length := range lengths {
			for i, c := range cells {
				if Thin() && length > 1000 && i != (a+l)%len(cells) {
					continue
				}
				if c.f32 {
					err = MatrixCell[float32](ctx, g, n, length, c.op)
				} else {
					err = MatrixCell[int64](ctx, g, n, length, c.op)
				}
				if err != nil {
					return nil, fmt.Errorf("%v: %w", algo, err)
				}
			}
		}
		if after != nil {
			if err := after(g); err != nil {
				return nil, err
			}
		}
	}
	return algos, nil
}

// MatrixCell is one rank's AllReduce of length elements of T with op on
// g, of n ranks, compared bit for bit with the sequential reference.
func MatrixCell[T allreduce.Numeric](ctx context.Context, g *allreduce.Group, n, length int, op allreduce.ReduceOp) error {
	inputs := make([][]T, n)
	for r := range inputs {
		inputs[r] = inputOf[T](uint64(length)+uint64(op), r, length, op)
	}
	buf := append([]T(nil), inputs[g.Rank()]...)
	if err := allreduce.AllReduce(ctx, g, buf, op); err != nil {
		return err
	}
	if err := DiffBits("result", buf, reduceOf(inputs, op)); err != nil {
		return fmt.Errorf("rank %d, %d elements, %v: %w", g.Rank(), length, op, err)
	}
	return nil
}

// KillMidAllReduce runs 4 MiB all-reduces on every rank of conns until
// they fail, except that rank victim, in the middle of its fourth, calls
// kill (which drops its endpoint without a word, as a crashed process
// would). It returns each rank's error (nil for the victim) and how long
// after the kill each failed.
func KillMidAllReduce(conns []transport.Conn, victim int, kill func(), opts ...allreduce.GroupOption) ([]error, []time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var killedAt time.Time
	var mu sync.Mutex
	returned := make([]time.Duration, len(conns))
	errs := RunRanks(conns, func(g *allreduce.Group) error {
		r := g.Rank()
		buf := make([]float32, 1<<20)
		for i := 0; ; i++ {
			if r == victim && i == 3 {
				time.Sleep(5 * time.Millisecond) // be in the middle of the next one
				mu.Lock()
				killedAt = time.Now()
				mu.Unlock()
				kill()
				return nil
			}
			if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
				mu.Lock()
				returned[r] = time.Since(killedAt)
				mu.Unlock()
				return err
			}
		}
	}, opts...)
	return errs, returned
}

// CrossProcessLengths are the AllReduce lengths a multi-process rank's
// matrix (RankMatrix) runs on n ranks: empty, one element, around n, and
// sizes that take several slots, frames or ring chunks per message.
func CrossProcessLengths(n int) []int {
	return []int{0, 1, n - 1, n + 1, 1000, 70000, ReducedHugeLen}
}

// LoopRing is a rank of a job that a test kills: it all-reduces 4 MiB of
// float32 with the ring over and over on a group over conn, printing
// "ready" on stdout after the first, until a call fails, and returns that
// error.
func LoopRing(ctx context.Context, conn transport.Conn) error {
	g, err := allreduce.NewGroup(conn, allreduce.WithAlgorithm(allreduce.Ring))
	if err != nil {
		return err
	}
	defer g.Close()
	buf := make([]float32, 1<<20)
	for i := 0; ; i++ {
		if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
			return err
		}
		if i == 0 {
			fmt.Println("ready")
		}
	}
}
