package ddp

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// rangeRecorder is a RangedOptimizer that records the ranges it updates.
type rangeRecorder struct {
	mu     sync.Mutex
	ranges [][2]int
	ended  bool
}

func (f *rangeRecorder) BeginStep(int) error { return nil }
func (f *rangeRecorder) EndStep() error      { f.ended = true; return nil }
func (f *rangeRecorder) StepRange(p, _ []float32, off int) error {
	f.mu.Lock()
	f.ranges = append(f.ranges, [2]int{off, off + len(p)})
	f.mu.Unlock()
	return nil
}

// oneBucketUpdates starts the updates of a step over one bucket of n
// elements, reported in parts (the default all-reduce's path).
func oneBucketUpdates(t *testing.T, n int) (*DDP[float32], *rangeRecorder, *updates, func(a, b int)) {
	f := &rangeRecorder{}
	d := &DDP[float32]{buckets: []bucketRange{{lo: 0, hi: n, params: 1}}, syncing: true,
		paramArena: make([]float32, n), gradArena: make([]float32, n)}
	d.stepper = arenaStepper[float32]{d: d, opt: f}
	u, err := d.startUpdates()
	require.NoError(t, err)
	require.True(t, u.ranged)
	return d, f, u, u.rangesFor(0, 0, n)
}

// finish is the end of a step whose one collective succeeded: hand, then
// finishUpdates; it fails the test if that takes seconds.
func finish(t *testing.T, d *DDP[float32], u *updates) error {
	out := make(chan error, 1)
	go func() {
		d.hand(u, 0)
		out <- d.finishUpdates(u, &StepStats{Buckets: 1, CommEnd: time.Now()}, nil)
	}()
	select {
	case err := <-out:
		select {
		case <-u.done: // the update goroutine has exited
		case <-time.After(5 * time.Second):
			t.Fatal("the update goroutine did not exit")
		}
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the end of the step hangs")
		return nil
	}
}

// TestUpdatesCoverEveryElementOnce: parts reported final are cut into
// spans of at most spanElems elements that cover the bucket once, shared
// by the update goroutine and the goroutine that ends the step, and the
// step ends.
func TestUpdatesCoverEveryElementOnce(t *testing.T) {
	n := 3*spanElems + 5
	d, f, u, report := oneBucketUpdates(t, n)
	report(0, n/3)
	report(n/3, n+7) // past the bucket: the agreement's values, not updated
	require.NoError(t, finish(t, d, u))
	require.True(t, f.ended)
	slices.SortFunc(f.ranges, func(a, b [2]int) int { return a[0] - b[0] })
	at := 0
	for _, r := range f.ranges {
		require.Equal(t, at, r[0], "ranges %v", f.ranges)
		require.LessOrEqual(t, r[1]-r[0], spanElems)
		at = r[1]
	}
	require.Equal(t, n, at)
}

// TestUpdatesReportedWrongly: a collective that reports an element twice,
// or leaves one out, makes the step fail naming the count rather than
// leave parameters updated twice or stale, and leaves nothing waiting (the
// update goroutine, asleep for the missing part, is woken to exit).
func TestUpdatesReportedWrongly(t *testing.T) {
	const n = 100
	d, f, u, report := oneBucketUpdates(t, n)
	report(0, n)
	report(0, 1)
	require.ErrorContains(t, finish(t, d, u), "left -1 of its elements over")
	require.False(t, f.ended)

	d, f, u, report = oneBucketUpdates(t, n)
	report(0, n-1)
	require.Eventually(t, func() bool { // asleep, waiting for the last element
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.parked
	}, 5*time.Second, time.Millisecond)
	require.ErrorContains(t, finish(t, d, u), "left 1 of its elements over")
	require.False(t, f.ended)
}

// TestUpdatesStopEarly: when the communication fails after some parts, the
// failure is returned and the update goroutine is waited for.
func TestUpdatesStopEarly(t *testing.T) {
	d, f, u, report := oneBucketUpdates(t, 100)
	report(0, 50)
	boom := errors.New("boom")
	require.ErrorIs(t, d.finishUpdates(u, &StepStats{}, boom), boom)
	<-u.done
	require.False(t, f.ended)
}
