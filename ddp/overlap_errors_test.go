package ddp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/internal/run/traintest"
	"github.com/ringddp/ringddp/optim"
)

// avgCollective is a user's bucket collective that all-reduces with Avg,
// as the default does: with it the buckets go to the optimizer whole, and
// the last one is updated by Run's goroutine.
func avgCollective(ctx context.Context, g *allreduce.Group, grads []float32, lo, hi int) error {
	return allreduce.AllReduce(ctx, g, grads[lo:hi], allreduce.Avg)
}

// TestOptimizerInBackwardWholeBuckets: with a bucket collective of the
// user's (whole buckets handed over, the last updated on Run's goroutine)
// the optimizer in backward gives bitwise the separate step's parameters
// and state, with many buckets and with one.
func TestOptimizerInBackwardWholeBuckets(t *testing.T) {
	for _, bucket := range []int{64, 1 << 20} {
		t.Run(fmt.Sprintf("bucket=%d", bucket), func(t *testing.T) {
			custom := ddp.WithBucketCollective[float32](avgCollective)
			want := trainOverlapOn(t, inprocRanks(), "mlp-odd", "adam", 3, 2, bucket, false, custom)
			got := trainOverlapOn(t, inprocRanks(), "mlp-odd", "adam", 3, 2, bucket, true, custom)
			requireSameTraining(t, want, got)
		})
	}
}

var errInjected = errors.New("injected collective failure")

// TestOptimizerInBackwardCollectiveFails: a bucket collective that fails
// at the second step, on the first bucket (communicated by Run's
// communication goroutine) or on the last (communicated by Run itself),
// makes Run return that failure, naming the bucket, on every rank within
// seconds (the update goroutine stopped, nothing left waiting), and Step
// then refuses to count the step. A cancelled context does the same with
// the default all-reduce, whose parts go to the optimizer as they become
// final.
func TestOptimizerInBackwardCollectiveFails(t *testing.T) {
	const ranks = 3
	for _, tc := range []struct {
		name   string
		bucket int
		last   bool // fail on the last bucket, else on the first
		cancel bool // a cancelled context instead of a failing collective
	}{
		{"first-of-many", 64, false, false},
		{"last-of-many", 64, true, false},
		{"only", 1 << 20, true, false},
		{"cancelled/many", 64, false, true},
		{"cancelled/one", 1 << 20, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			errs := allreducetest.RunInproc(ranks, 20*time.Second, func(g *allreduce.Group) error {
				opt, err := optim.NewSGD[float32](optim.SGDConfig{LR: 0.1, Momentum: 0.9})
				if err != nil {
					return err
				}
				var d *ddp.DDP[float32]
				step, failLo := 0, -1
				opts := []ddp.Option{ddp.WithBucketBytes(tc.bucket, tc.bucket), ddp.WithOptimizerInBackward[float32](opt)}
				if !tc.cancel {
					opts = append(opts, ddp.WithBucketCollective[float32](func(ctx context.Context, g *allreduce.Group, grads []float32, lo, hi int) error {
						if err := avgCollective(ctx, g, grads, lo, hi); err != nil {
							return err
						}
						if step == 1 && lo == failLo {
							return errInjected
						}
						return nil
					}))
				}
				n, dd := traintest.BuildNet[float32](t, "mlp-odd", 2, g, opts...)
				d = dd
				ranges := d.BucketRanges()
				failLo = ranges[0][0]
				if tc.last {
					failLo = ranges[len(ranges)-1][0]
				}
				for ; step < 2; step++ {
					x, y := traintest.BatchData[float32](step, 2*ranks)
					xr, yr := traintest.Rows(x, y, g.Rank(), 2)
					traintest.SetInput(t, n, xr, yr)
					ctx, cancel := context.WithCancel(context.Background())
					if tc.cancel && step == 1 {
						cancel()
					}
					err := d.Run(ctx, n.VM)
					cancel()
					if step == 0 {
						if err != nil {
							return err
						}
						if err := d.Step(context.Background(), nil); err != nil {
							return err
						}
						continue
					}
					if tc.cancel {
						if !errors.Is(err, context.Canceled) {
							return fmt.Errorf("Run with a cancelled context: %v", err)
						}
					} else {
						want := 0
						if tc.last {
							want = len(ranges) - 1
						}
						if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), fmt.Sprintf("communicating bucket %d:", want)) {
							return fmt.Errorf("Run with bucket %d's collective failing: %v", want, err)
						}
					}
					if err := d.Step(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "without a synchronised Run") {
						return fmt.Errorf("Step after the failed Run: %v", err)
					}
				}
				return nil
			})
			require.NoError(t, allreducetest.FirstError(errs))
			require.Less(t, time.Since(began), 10*time.Second)
		})
	}
}
