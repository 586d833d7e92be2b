package trainer

import (
	"context"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// TestMaxStepsReportsPartialEpoch: a run stopped by MaxSteps inside an
// epoch reports that epoch like a full one, marked partial: its steps, the
// mean of their losses, its throughput and communication, and the test set
// evaluated at the stop (checked against a plain evaluation of the final
// parameters). A stop at an epoch's end reports nothing more.
func TestMaxStepsReportsPartialEpoch(t *testing.T) {
	cfg := small()
	cfg.MaxSteps = 32 // epoch 2, step 7
	var epochs []EpochMetrics
	var steps []StepInfo
	cfg.OnEpoch = func(m EpochMetrics) { epochs = append(epochs, m) }
	cfg.OnStep = func(s StepInfo) { steps = append(steps, s) }
	res, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	require.Equal(t, StopMaxSteps, res.Stop)
	require.Equal(t, res.Epochs, epochs)
	require.Len(t, epochs, 2)
	full, part := epochs[0], epochs[1]
	require.False(t, full.Partial)
	require.Equal(t, 25, full.StepInEpoch)
	require.True(t, part.Partial)
	require.Equal(t, 2, part.Epoch)
	require.Equal(t, 7, part.Steps)
	require.Equal(t, 7, part.StepInEpoch)
	require.Equal(t, 25, part.StepsPerEpoch)
	require.Equal(t, int64(32), part.GlobalStep)
	mean := 0.0
	for _, s := range steps[25:] {
		mean += s.Loss
	}
	require.InDelta(t, mean/7, part.TrainLoss, 1e-12)
	require.Greater(t, part.SamplesPerSec, 0.0)
	require.Greater(t, part.CommSeconds, 0.0)
	require.Greater(t, part.ComputeSeconds, 0.0)
	require.Equal(t, 201, part.TestCount)
	correct, loss := referenceEval(t, res.Params, cfg.Test)
	require.Equal(t, correct, part.TestCorrect)
	require.InDelta(t, loss, part.TestLoss, 1e-5)

	cfg.MaxSteps = 25
	epochs = nil
	res, err = Run(ctxT(t), cfg)
	require.NoError(t, err)
	require.Equal(t, StopMaxSteps, res.Stop)
	require.Len(t, epochs, 1)
	require.False(t, epochs[0].Partial)
}

// TestStepLossesMatchSingleProcess: the loss every step reports (the
// ranks' losses averaged with the last gradient bucket) and the final
// parameters match one rank training on the same global batches, under DDP
// and ZeRO-1, in float64. The sampler gives step s the same global batch
// on every world size; only the order of summation differs.
func TestStepLossesMatchSingleProcess(t *testing.T) {
	run := func(ranks int, zero1 bool) ([]float64, *Result) {
		cfg := small()
		cfg.DType, cfg.Epochs, cfg.Ranks, cfg.Zero1 = Float64, 1, ranks, zero1
		cfg.Optim, cfg.LR, cfg.Momentum = OptimAdam, 1e-3, 0
		var losses []float64
		cfg.OnStep = func(s StepInfo) { losses = append(losses, s.Loss) }
		res, err := Run(ctxT(t), cfg)
		require.NoError(t, err)
		return losses, res
	}
	want, ref := run(1, false)
	require.Len(t, want, 25)
	for _, ranks := range []int{2, 4} {
		for _, zero1 := range []bool{false, true} {
			got, res := run(ranks, zero1)
			require.Len(t, got, len(want))
			for s := range want {
				require.InDelta(t, want[s], got[s], 1e-9*math.Max(1, want[s]), "ranks %d zero1 %v step %d", ranks, zero1, s+1)
			}
			require.Less(t, maxParamDiff(ref.Params, res.Params), 1e-9, "ranks %d zero1 %v", ranks, zero1)
			m := res.Epochs[0]
			require.InDelta(t, ref.Epochs[0].TrainLoss, m.TrainLoss, 1e-9)
			require.Greater(t, m.CommSeconds, 0.0, "ranks %d zero1 %v", ranks, zero1)
		}
	}
}

// seqConn records the highest collective sequence number rank 0 sends: the
// number of collectives its group ran, less one.
type seqConn struct {
	transport.Conn
	last *atomic.Int64
}

func (c seqConn) Send(ctx context.Context, to int, h transport.Header, p []byte) error {
	if c.Rank() == 0 && int64(h.Seq) > c.last.Load() {
		c.last.Store(int64(h.Seq))
	}
	return c.Conn.Send(ctx, to, h, p)
}

// TestSyncPointsPerEpoch: an epoch costs one collective per gradient bucket
// per step (the loss and the stop vote ride with the last bucket) and one
// to close it (the evaluation and the step times together), counted on
// the wire of a transport without shared memory.
func TestSyncPointsPerEpoch(t *testing.T) {
	collectives := func(epochs int) int64 {
		var last atomic.Int64
		cfg := small()
		cfg.Epochs = epochs
		cfg.Connect = func(ctx context.Context, ranks int) ([]transport.Conn, error) {
			w, err := inproc.NewWorld(ranks, inproc.WithTimeout(30*time.Second))
			if err != nil {
				return nil, err
			}
			conns := make([]transport.Conn, ranks)
			for r := range conns {
				conns[r] = seqConn{Conn: w.Conn(r), last: &last}
			}
			return conns, nil
		}
		var plan Plan
		cfg.OnStart = func(p Plan) { plan = p }
		_, err := Run(ctxT(t), cfg)
		require.NoError(t, err)
		require.Equal(t, 1, plan.Buckets)
		return last.Load() + 1
	}
	one, two := collectives(1), collectives(2)
	require.Equal(t, int64(25*1+1), two-one, "collectives in one epoch of 25 steps with one bucket")
}
