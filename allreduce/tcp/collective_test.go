package tcp_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
)

var secret = []byte("collective test secret")

// tcpConns dials n ranks over loopback in this process.
func tcpConns(tb testing.TB, n int, timeout time.Duration) []*tcp.Conn {
	tb.Helper()
	return tcpConnsWith(tb, n, timeout, nil)
}

// tcpConnsWith is tcpConns with mod adjusting each rank's config.
func tcpConnsWith(tb testing.TB, n int, timeout time.Duration, mod func(*tcp.Config)) []*tcp.Conn {
	tb.Helper()
	store := rendezvous.NewMemStore()
	conns := make([]*tcp.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := tcp.Config{
				Rank: r, Size: n, Store: store, Secret: secret,
				Timeout: timeout, ConnectTimeout: 20 * time.Second,
			}
			if mod != nil {
				mod(&cfg)
			}
			conns[r], errs[r] = tcp.Dial(context.Background(), cfg)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
	return conns
}

func tcpGroups(tb testing.TB, n int, timeout time.Duration) []*allreduce.Group {
	tb.Helper()
	conns := tcpConns(tb, n, timeout)
	groups := make([]*allreduce.Group, n)
	for r, c := range conns {
		g, err := allreduce.NewGroup(c)
		if err != nil {
			tb.Fatal(err)
		}
		groups[r] = g
	}
	tb.Cleanup(func() {
		for _, g := range groups {
			g.Close()
		}
	})
	return groups
}

// onEveryRank runs fn on every group at once and returns the errors by rank.
func onEveryRank(groups []*allreduce.Group, fn func(r int, g *allreduce.Group) error) []error {
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r, g)
		}()
	}
	wg.Wait()
	return errs
}

type cell struct {
	coll   allreduce.Kind
	length int
	op     allreduce.ReduceOp
	dtype  string
	root   int
}

func (c cell) String() string {
	s := fmt.Sprintf("%v/len=%d", c.coll, c.length)
	if c.op != 0 {
		s += "/" + c.op.String()
	}
	if c.root >= 0 {
		s += fmt.Sprintf("/root=%d", c.root)
	}
	return s + "/" + c.dtype
}

const bigLen = 1<<18 + 3

// cells is the reduced matrix for n ranks.
func cells(n int) []cell {
	var out []cell
	lens := []int{0, 1, n + 1, 1000, bigLen}
	if n == 1 {
		lens = []int{0, 1, 1000, bigLen}
	}
	i := 0
	for _, coll := range []allreduce.Kind{allreduce.KindAllReduce, allreduce.KindReduceScatter, allreduce.KindAllGather, allreduce.KindBroadcast, allreduce.KindReduce} {
		ops := []allreduce.ReduceOp{0}
		if coll == allreduce.KindAllReduce || coll == allreduce.KindReduceScatter || coll == allreduce.KindReduce {
			ops = []allreduce.ReduceOp{allreduce.Sum, allreduce.Max}
		}
		for _, length := range lens {
			for _, op := range ops {
				for _, dt := range []string{"float32", "int64"} {
					root := -1
					if coll == allreduce.KindBroadcast || coll == allreduce.KindReduce {
						root = i % n // vary the root across cells
						i++
					}
					out = append(out, cell{coll: coll, length: length, op: op, dtype: dt, root: root})
				}
			}
		}
	}
	return append(out, cell{coll: allreduce.KindBarrier, root: -1, dtype: "none"})
}

// TestCollectivesOverTCP runs every collective over TCP ranks in one
// process against the sequential reference: ranks 1..5 × lengths
// {0, 1, N+1, 1000, 2^18+3} × {Sum, Max} × {float32, int64}.
func TestCollectivesOverTCP(t *testing.T) {
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			groups := tcpGroups(t, n, 20*time.Second)
			defer inputCache.Clear()
			defer refCache.Clear()
			for _, c := range cells(n) {
				ok := t.Run(c.String(), func(t *testing.T) {
					var errs []error
					switch c.dtype {
					case "int64":
						errs = runCell[int64](groups, c)
					default:
						errs = runCell[float32](groups, c)
					}
					for r, err := range errs {
						if err != nil {
							t.Errorf("rank %d: %v", r, err)
						}
					}
				})
				if !ok {
					t.FailNow() // the groups are poisoned
				}
			}
		})
	}
}

// Inputs and references are cached: the cells of one rank count share them
// (generating them dominates the matrix under the race detector).
var inputCache, refCache sync.Map

func cellInputs[T allreduce.Numeric](n, length int) [][]T {
	key := fmt.Sprintf("%T/%d/%d", *new(T), n, length)
	if v, ok := inputCache.Load(key); ok {
		return v.([][]T)
	}
	inputs := make([][]T, n)
	for r := range inputs {
		inputs[r] = allreducetest.Input[T](uint64(length), r, length, allreduce.Sum)
	}
	inputCache.Store(key, inputs)
	return inputs
}

func runCell[T allreduce.Numeric](groups []*allreduce.Group, c cell) []error {
	n := len(groups)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inputs := cellInputs[T](n, c.length)
	var ref []T
	if c.op != 0 {
		key := fmt.Sprintf("%T/%d/%d/%v", ref, n, c.length, c.op)
		if v, ok := refCache.Load(key); ok {
			ref = v.([]T)
		} else {
			ref = allreducetest.Reduce(inputs, c.op)
			refCache.Store(key, ref)
		}
	}
	return onEveryRank(groups, func(r int, g *allreduce.Group) error {
		in := slices.Clone(inputs[r])
		var got, want []T
		var err error
		switch c.coll {
		case allreduce.KindAllReduce:
			err = allreduce.AllReduce(ctx, g, in, c.op)
			got, want = in, ref
		case allreduce.KindReduceScatter:
			lo, hi := allreduce.ChunkBounds(c.length, n, r)
			got = make([]T, hi-lo)
			err = allreduce.ReduceScatter(ctx, g, got, in, c.op)
			want = ref[lo:hi]
		case allreduce.KindAllGather:
			lo, hi := allreduce.ChunkBounds(c.length, n, r)
			got = make([]T, c.length)
			err = allreduce.AllGather(ctx, g, got, slices.Clone(inputs[0][lo:hi]))
			want = inputs[0]
		case allreduce.KindBroadcast:
			err = allreduce.Broadcast(ctx, g, in, c.root)
			got, want = in, inputs[c.root]
		case allreduce.KindReduce:
			err = allreduce.Reduce(ctx, g, in, c.op, c.root)
			got, want = in, inputs[r]
			if r == c.root {
				want = ref
			}
		case allreduce.KindBarrier:
			return allreduce.Barrier(ctx, g)
		}
		if err != nil {
			return err
		}
		if len(got) != len(want) {
			return fmt.Errorf("%d elements, want %d", len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				return fmt.Errorf("element %d is %v, want %v", i, got[i], want[i])
			}
		}
		return nil
	})
}

// TestGroupMismatchOverTCP: ranks calling different collectives both fail
// with the mismatch, not a hang.
func TestGroupMismatchOverTCP(t *testing.T) {
	for _, n := range []int{2, 3} {
		groups := tcpGroups(t, n, 10*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		start := time.Now()
		errs := onEveryRank(groups, func(r int, g *allreduce.Group) error {
			buf := make([]float32, 1000)
			if r == 1 {
				return allreduce.Broadcast(ctx, g, buf, 0)
			}
			return allreduce.AllReduce(ctx, g, buf, allreduce.Sum)
		})
		cancel()
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("n=%d: took %v", n, el)
		}
		for r, err := range errs {
			mism := errors.Is(err, transport.ErrMismatch) ||
				(errors.Is(err, transport.ErrPeer) && strings.Contains(err.Error(), "mismatch"))
			if !mism {
				t.Errorf("n=%d rank %d: %v, want a mismatch error", n, r, err)
			} else {
				t.Logf("n=%d rank %d: %v", n, r, err)
			}
		}
	}
}

// TestKillMidAllReduce: a rank whose connections drop in the middle of an
// all-reduce makes every other rank fail promptly, long before the timeout.
func TestKillMidAllReduce(t *testing.T) {
	const n, victim = 4, 2
	const timeout = 20 * time.Second
	conns := tcpConns(t, n, timeout)
	groups := make([]*allreduce.Group, n)
	for r, c := range conns {
		groups[r], _ = allreduce.NewGroup(c)
	}
	defer func() {
		for _, g := range groups {
			g.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var killedAt time.Time
	var mu sync.Mutex
	returned := make([]time.Duration, n)
	errs := onEveryRank(groups, func(r int, g *allreduce.Group) error {
		buf := make([]float32, 1<<20)
		for i := 0; ; i++ {
			if r == victim && i == 3 {
				time.Sleep(5 * time.Millisecond) // be in the middle of the next one
				mu.Lock()
				killedAt = time.Now()
				mu.Unlock()
				tcp.Kill(conns[victim])
				return nil
			}
			if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
				mu.Lock()
				returned[r] = time.Since(killedAt)
				mu.Unlock()
				return err
			}
		}
	})
	for r, err := range errs {
		if r == victim {
			continue
		}
		if !errors.Is(err, transport.ErrPeer) {
			t.Errorf("rank %d: %v, want a peer failure", r, err)
		}
		if returned[r] > timeout/4 {
			t.Errorf("rank %d failed %v after the kill", r, returned[r])
		}
		t.Logf("rank %d after %v: %v", r, returned[r], err)
	}
}
