package allreduce_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/reference"
	"github.com/ringddp/ringddp/numeric"
)

// inflight is one collective of a batch issued back-to-back: start issues
// it on a rank, check verifies that rank's buffers once it is done.
type inflight struct {
	name  string
	start func(ctx context.Context, g *allreduce.Group) *allreduce.Work
	sync  func(ctx context.Context, g *allreduce.Group) error
	check func() error
}

// batchOp builds collective i of a batch for rank r of n: kinds, sizes,
// dtypes and ops all vary with i, the same way on every rank.
func batchOp(i, r, n int) inflight {
	length := 1 + (i*397)%2500
	if i%7 == 3 {
		length = i % 3 // tiny ones, including empty
	}
	op := allOps[i%len(allOps)]
	if i%2 == 0 {
		return batchOpT[float32](i, r, n, length, op)
	}
	if op == allreduce.Avg {
		op = allreduce.Sum
	}
	return batchOpT[int64](i, r, n, length, op)
}

func batchOpT[T numeric.Arith](i, r, n, length int, op allreduce.ReduceOp) inflight {
	seed := uint64(1000 + i)
	inputs := make([][]T, n)
	for q := range inputs {
		inputs[q] = reference.Input[T](seed, q, length, op)
	}
	in := inputs[r]
	name := fmt.Sprintf("#%d", i)
	switch i % 6 {
	case 0, 1: // AllReduce, the common case
		buf := slices.Clone(in)
		return inflight{
			name: fmt.Sprintf("%s AllReduce(%T×%d, %v)", name, *new(T), length, op),
			start: func(ctx context.Context, g *allreduce.Group) *allreduce.Work {
				return allreduce.AllReduceAsync(ctx, g, buf, op)
			},
			sync:  func(ctx context.Context, g *allreduce.Group) error { return allreduce.AllReduce(ctx, g, buf, op) },
			check: func() error { return allreducetest.DiffBits("result", buf, reference.Reduce(inputs, op)) },
		}
	case 2:
		lo, hi := allreduce.ChunkBounds(length, n, r)
		src := slices.Clone(in)
		dst := allreducetest.Filled[T](hi - lo)
		return inflight{
			name: fmt.Sprintf("%s ReduceScatter(%T×%d, %v)", name, *new(T), length, op),
			start: func(ctx context.Context, g *allreduce.Group) *allreduce.Work {
				return allreduce.ReduceScatterAsync(ctx, g, dst, src, op)
			},
			sync: func(ctx context.Context, g *allreduce.Group) error {
				return allreduce.ReduceScatter(ctx, g, dst, src, op)
			},
			check: func() error {
				if err := allreducetest.DiffBits("src", src, in); err != nil {
					return err
				}
				return allreducetest.DiffBits("chunk", dst, reference.Reduce(inputs, op)[lo:hi])
			},
		}
	case 3:
		lo, hi := allreduce.ChunkBounds(length, n, r)
		dst := allreducetest.Filled[T](length)
		src := slices.Clone(inputs[0][lo:hi])
		return inflight{
			name: fmt.Sprintf("%s AllGather(%T×%d)", name, *new(T), length),
			start: func(ctx context.Context, g *allreduce.Group) *allreduce.Work {
				return allreduce.AllGatherAsync(ctx, g, dst, src)
			},
			sync:  func(ctx context.Context, g *allreduce.Group) error { return allreduce.AllGather(ctx, g, dst, src) },
			check: func() error { return allreducetest.DiffBits("gathered", dst, inputs[0]) },
		}
	case 4:
		root := i % n
		buf := slices.Clone(in)
		return inflight{
			name: fmt.Sprintf("%s Broadcast(%T×%d, root %d)", name, *new(T), length, root),
			start: func(ctx context.Context, g *allreduce.Group) *allreduce.Work {
				return allreduce.BroadcastAsync(ctx, g, buf, root)
			},
			sync:  func(ctx context.Context, g *allreduce.Group) error { return allreduce.Broadcast(ctx, g, buf, root) },
			check: func() error { return allreducetest.DiffBits("buffer", buf, inputs[root]) },
		}
	default:
		if i%12 == 11 {
			return inflight{
				name:  name + " Barrier",
				start: func(ctx context.Context, g *allreduce.Group) *allreduce.Work { return allreduce.BarrierAsync(ctx, g) },
				sync:  func(ctx context.Context, g *allreduce.Group) error { return allreduce.Barrier(ctx, g) },
				check: func() error { return nil },
			}
		}
		root := (i / 6) % n
		buf := slices.Clone(in)
		want := in
		if r == root {
			want = reference.Reduce(inputs, op)
		}
		return inflight{
			name: fmt.Sprintf("%s Reduce(%T×%d, %v, root %d)", name, *new(T), length, op, root),
			start: func(ctx context.Context, g *allreduce.Group) *allreduce.Work {
				return allreduce.ReduceAsync(ctx, g, buf, op, root)
			},
			sync:  func(ctx context.Context, g *allreduce.Group) error { return allreduce.Reduce(ctx, g, buf, op, root) },
			check: func() error { return allreducetest.DiffBits("buffer", buf, want) },
		}
	}
}

// TestAsyncManyInFlight issues 50 collectives of every kind, size, dtype and
// op back-to-back on every rank, then waits for all of them.
func TestAsyncManyInFlight(t *testing.T) {
	for _, algo := range []allreduce.Algorithm{allreduce.Auto, allreduce.Ring} {
		for _, n := range []int{1, 2, 3, 5, 8} {
			t.Run(fmt.Sprintf("algo=%v/ranks=%d", algo, n), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				const count = 50
				errs := allreducetest.RunInproc(n, 10*time.Second, func(g *allreduce.Group) error {
					ops := make([]inflight, count)
					works := make([]*allreduce.Work, count)
					for i := range ops {
						ops[i] = batchOp(i, g.Rank(), n)
					}
					for i := range ops {
						works[i] = ops[i].start(ctx, g)
					}
					if err := allreduce.WaitAll(ctx, works...); err != nil {
						return err
					}
					for i, w := range works {
						select {
						case <-w.Done():
						default:
							return fmt.Errorf("%s: Done not closed after WaitAll", ops[i].name)
						}
						if err := w.Err(); err != nil {
							return fmt.Errorf("%s: Err() = %v after WaitAll returned nil", ops[i].name, err)
						}
						if err := ops[i].check(); err != nil {
							return fmt.Errorf("%s: %w", ops[i].name, err)
						}
					}
					return nil
				}, allreduce.WithAlgorithm(algo))
				allreducetest.RequireNoErrors(t, errs)
			})
		}
	}
}

// TestAsyncMixedWithSync interleaves async and sync calls on one rank's
// goroutine: a sync call issued after async ones runs after them, so by the
// time it returns their results are in place.
func TestAsyncMixedWithSync(t *testing.T) {
	const n, count = 4, 30
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := allreducetest.RunInproc(n, 10*time.Second, func(g *allreduce.Group) error {
		var works []*allreduce.Work
		var started []inflight
		for i := range count {
			op := batchOp(i, g.Rank(), n)
			if i%4 == 3 {
				if err := op.sync(ctx, g); err != nil {
					return fmt.Errorf("%s: %w", op.name, err)
				}
				// Every collective issued before this one has run. (Its
				// Done may close a moment after the next call starts, so
				// wait for it, briefly.)
				for j, w := range works {
					select {
					case <-w.Done():
					case <-time.After(2 * time.Second):
						return fmt.Errorf("%s returned but earlier %s is not done", op.name, started[j].name)
					}
					if err := started[j].check(); err != nil {
						return fmt.Errorf("%s: %w", started[j].name, err)
					}
				}
				if err := op.check(); err != nil {
					return fmt.Errorf("%s: %w", op.name, err)
				}
				continue
			}
			works = append(works, op.start(ctx, g))
			started = append(started, op)
		}
		for i, w := range works {
			if err := w.Wait(ctx); err != nil {
				return fmt.Errorf("%s: %w", started[i].name, err)
			}
			if err := started[i].check(); err != nil {
				return fmt.Errorf("%s: %w", started[i].name, err)
			}
		}
		return nil
	})
	allreducetest.RequireNoErrors(t, errs)
}

// TestConcurrentSyncOrdered makes sync calls from several goroutines per
// rank. A baton passed from goroutine to goroutine fixes the issue order,
// the same on every rank, while the calls themselves come from different
// goroutines.
func TestConcurrentSyncOrdered(t *testing.T) {
	const n, workers, perWorker = 4, 4, 6
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := allreducetest.RunInproc(n, 10*time.Second, func(g *allreduce.Group) error {
		total := workers * perWorker
		batons := make([]chan struct{}, total+1)
		for i := range batons {
			batons[i] = make(chan struct{})
		}
		var wg sync.WaitGroup
		errs := make([]error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range perWorker {
					i := j*workers + w
					select {
					case <-batons[i]:
					case <-ctx.Done():
						errs[w] = ctx.Err()
						return
					}
					op := batchOp(i, g.Rank(), n)
					err := op.sync(ctx, g)
					if err == nil {
						if err = op.check(); err != nil {
							g.Abort(err) // the other workers' calls end too
						}
					}
					close(batons[i+1])
					if err != nil {
						errs[w] = fmt.Errorf("%s: %w", op.name, err)
						return
					}
				}
			}()
		}
		close(batons[0])
		wg.Wait()
		return errors.Join(errs...)
	})
	allreducetest.RequireNoErrors(t, errs)
}

// TestConcurrentSyncUnordered makes sync AllReduce calls from several
// goroutines per rank with no ordering at all. Every call on a rank has the
// same signature and input, so whichever calls the ranks pair up, each
// result is the reference; the test is for races and deadlocks.
func TestConcurrentSyncUnordered(t *testing.T) {
	for _, algo := range []allreduce.Algorithm{allreduce.Auto, allreduce.Ring} {
		t.Run("algo="+algo.String(), func(t *testing.T) {
			const n, workers, perWorker, length = 3, 5, 8, 777
			inputs := make([][]float64, n)
			for r := range inputs {
				inputs[r] = reference.Input[float64](5, r, length, allreduce.Sum)
			}
			want := reference.Reduce(inputs, allreduce.Sum)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := allreducetest.RunInproc(n, 10*time.Second, func(g *allreduce.Group) error {
				var wg sync.WaitGroup
				errs := make([]error, workers)
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range perWorker {
							buf := slices.Clone(inputs[g.Rank()])
							if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
								errs[w] = err
								return
							}
							if err := allreducetest.DiffBits("result", buf, want); err != nil {
								g.Abort(err) // the other workers' calls end too
								errs[w] = err
								return
							}
						}
					}()
				}
				wg.Wait()
				return errors.Join(errs...)
			}, allreduce.WithAlgorithm(algo))
			allreducetest.RequireNoErrors(t, errs)
		})
	}
}

// TestSeveralGroupsAtOnce runs independent worlds of different sizes
// concurrently, each with its own stream of collectives.
func TestSeveralGroupsAtOnce(t *testing.T) {
	sizes := []int{2, 3, 4, 5, 7}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	results := make([]error, len(sizes))
	for k, n := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs := allreducetest.RunInproc(n, 10*time.Second, func(g *allreduce.Group) error {
				for i := range 20 {
					op := batchOp(i+k, g.Rank(), n)
					var err error
					if i%2 == 0 {
						err = op.start(ctx, g).Wait(ctx)
					} else {
						err = op.sync(ctx, g)
					}
					if err == nil {
						err = op.check()
					}
					if err != nil {
						return fmt.Errorf("%s: %w", op.name, err)
					}
				}
				return nil
			})
			results[k] = allreducetest.FirstError(errs)
		}()
	}
	wg.Wait()
	for k, err := range results {
		require.NoError(t, err, "world of %d ranks", sizes[k])
	}
}

// newGroups makes n Groups over a fresh in-process world, closed at the
// end of the test, for tests that drive them from the test's goroutine.
func newGroups(t *testing.T, n int, timeout time.Duration, opts ...allreduce.GroupOption) []*allreduce.Group {
	t.Helper()
	return allreducetest.Groups(t, allreducetest.Inproc(timeout)(t, n), opts...)
}

// TestWorkErrAndWait checks the Work handle: Err is nil and Done open while
// the collective runs; Wait with an ended ctx returns ctx.Err() at once
// without ending the collective; afterwards Err returns the collective's
// result, the same value on every call.
func TestWorkErrAndWait(t *testing.T) {
	groups := newGroups(t, 2, 10*time.Second)
	bufs := [][]float32{{1, 2, 3}, {10, 20, 30}}
	w0 := allreduce.AllReduceAsync(context.Background(), groups[0], bufs[0], allreduce.Sum)

	// Rank 1 has not joined: the collective cannot finish.
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, w0.Err(), "Err before the collective finished")
	select {
	case <-w0.Done():
		t.Fatal("Done closed before rank 1 joined")
	default:
	}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err := w0.Wait(cancelled)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, cancelled.Err(), err, "Wait must return ctx.Err() itself")
	require.Less(t, time.Since(start), 500*time.Millisecond, "Wait with a cancelled ctx must not wait")

	expired, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	require.ErrorIs(t, w0.Wait(expired), context.DeadlineExceeded)
	require.NoError(t, w0.Err(), "giving up a Wait must not end the collective")

	// Rank 1 joins; the collective completes normally.
	w1 := allreduce.AllReduceAsync(context.Background(), groups[1], bufs[1], allreduce.Sum)
	ctx, cancel3 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel3()
	require.NoError(t, allreduce.WaitAll(ctx, w0, w1))
	require.NoError(t, w0.Err())
	require.Equal(t, []float32{11, 22, 33}, bufs[0])
	require.Equal(t, []float32{11, 22, 33}, bufs[1])

	// A failed collective: the same error value from Wait and every Err.
	wf := allreduce.AllReduceAsync(ctx, groups[0], []int32{1}, allreduce.Avg)
	werr := wf.Wait(ctx)
	require.ErrorIs(t, werr, allreduce.ErrInvalid)
	for range 3 {
		require.True(t, wf.Err() == werr, "Err() = %v, want the identical error %v", wf.Err(), werr)
		require.True(t, wf.Wait(ctx) == werr, "Wait again must return the identical error")
	}
}

// TestWaitAllFirstError checks that WaitAll waits for every Work and returns
// the first error in argument order.
func TestWaitAllFirstError(t *testing.T) {
	groups := newGroups(t, 1, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g := groups[0]
	ok := allreduce.AllReduceAsync(ctx, g, []float32{1}, allreduce.Sum)
	bad := allreduce.AllReduceAsync(ctx, g, []int64{1}, allreduce.Avg)
	after := allreduce.AllReduceAsync(ctx, g, []float32{1}, allreduce.Sum)
	err := allreduce.WaitAll(ctx, ok, bad, after)
	require.ErrorIs(t, err, allreduce.ErrInvalid)
	for _, w := range []*allreduce.Work{ok, bad, after} {
		select {
		case <-w.Done():
		default:
			t.Fatal("WaitAll returned before every Work was done")
		}
	}
	require.NoError(t, ok.Err())
	require.ErrorIs(t, after.Err(), allreduce.ErrGroupFailed, "a call after a failure fails")
}

// TestCloseFailsQueuedWork closes a group with collectives queued that can
// never complete (the peers never call): Close must fail all of them and
// return only once they have returned.
func TestCloseFailsQueuedWork(t *testing.T) {
	for _, algo := range []allreduce.Algorithm{allreduce.Auto, allreduce.Ring} {
		t.Run("algo="+algo.String(), func(t *testing.T) {
			groups := newGroups(t, 3, 10*time.Second, allreduce.WithAlgorithm(algo))
			ctx := context.Background()
			var works []*allreduce.Work
			for i := 1; i <= 6; i++ { // #0 is queued first and not empty
				works = append(works, batchOp(i, 0, 3).start(ctx, groups[0]))
			}
			time.Sleep(10 * time.Millisecond)
			start := time.Now()
			require.NoError(t, groups[0].Close())
			require.Less(t, time.Since(start), 2*time.Second, "Close must not wait for the timeout")
			for i, w := range works {
				select {
				case <-w.Done():
				default:
					t.Fatalf("work %d still running after Close returned", i)
				}
				require.Error(t, w.Err(), "work %d", i)
				require.True(t, errors.Is(w.Err(), transport.ErrClosed) || errors.Is(w.Err(), allreduce.ErrGroupFailed),
					"work %d: %v", i, w.Err())
			}
			// Later calls fail at once.
			err := allreduce.AllReduce(ctx, groups[0], []float32{1}, allreduce.Sum)
			require.ErrorIs(t, err, allreduce.ErrGroupFailed)
			require.ErrorIs(t, err, transport.ErrClosed)
		})
	}
}

// TestNoGoroutineLeak runs collectives (successful, failing, queued at
// Close) on several groups and checks that once the groups are closed the
// number of goroutines returns to what it was.
func TestNoGoroutineLeak(t *testing.T) {
	runtime.GC()
	baseline := runtime.NumGoroutine()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, algo := range []allreduce.Algorithm{allreduce.Auto, allreduce.Ring} {
		// Successful async batches.
		errs := allreducetest.RunInproc(4, 5*time.Second, func(g *allreduce.Group) error {
			var works []*allreduce.Work
			for i := range 20 {
				works = append(works, batchOp(i, g.Rank(), 4).start(ctx, g))
			}
			return allreduce.WaitAll(ctx, works...)
		}, allreduce.WithAlgorithm(algo))
		allreducetest.RequireNoErrors(t, errs)

		// A failure mid-stream, with async work queued behind it.
		errs = allreducetest.RunInproc(3, 5*time.Second, func(g *allreduce.Group) error {
			var works []*allreduce.Work
			for i := range 10 {
				if i == 4 && g.Rank() == 1 {
					works = append(works, allreduce.AllReduceAsync(ctx, g, []int32{1, 2}, allreduce.Avg))
					continue
				}
				works = append(works, batchOp(i, g.Rank(), 3).start(ctx, g))
			}
			return allreduce.WaitAll(ctx, works...)
		}, allreduce.WithAlgorithm(algo))
		for r, err := range errs {
			require.Error(t, err, "rank %d", r)
		}

		// Work queued at Close, never waited for.
		groups := newGroups(t, 3, 5*time.Second, allreduce.WithAlgorithm(algo))
		for i := range 5 {
			batchOp(i, 0, 3).start(ctx, groups[0])
			batchOp(i, 1, 3).start(ctx, groups[1])
		}
		for _, g := range groups {
			require.NoError(t, g.Close())
		}
	}

	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= baseline {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines left, %d before:\n%s", n, baseline, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestQueuedSyncCallHonoursCtx: a sync call queued behind a collective
// that cannot finish (a peer has not joined) must return when its own
// context ends, not when the earlier collective times out.
func TestQueuedSyncCallHonoursCtx(t *testing.T) {
	groups := newGroups(t, 2, 3*time.Second)
	stuck := allreduce.AllReduceAsync(context.Background(), groups[0], make([]float32, 10), allreduce.Sum)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := allreduce.AllReduce(ctx, groups[0], make([]float32, 10), allreduce.Sum)
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, took, time.Second, "the queued call must give up with its context")
	_ = stuck
}

// TestWaitOnFinishedWorkPrefersResult: Wait on a Work that has finished
// returns its result even if ctx has ended too.
func TestWaitOnFinishedWorkPrefersResult(t *testing.T) {
	groups := newGroups(t, 1, time.Second)
	w := allreduce.AllReduceAsync(context.Background(), groups[0], []float32{1}, allreduce.Sum)
	<-w.Done()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 100 {
		require.NoError(t, w.Wait(ctx), "try %d", i)
	}
}
