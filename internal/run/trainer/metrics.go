package trainer

import "github.com/ringddp/ringddp/allreduce/rendezvous"

// Plan describes a run once its data and model are set up (OnStart).
type Plan struct {
	Model, DType, Optim string
	Ranks               int
	GlobalBatch         int
	PerRankBatch        int
	StepsPerEpoch       int
	Epochs              int
	TrainExamples       int
	TestExamples        int
	Params              int   // trainable elements
	ParamBytes          int64 // Params × element size: M, the bytes all-reduced per step
	Buckets             int
	CommBytesPerStep    int64 // 2(N-1)/N · M: bytes each rank sends per step (ring all-reduce)
	LR                  float64
	Momentum            float64
	WeightDecay         float64
	Resumed             bool
	StartEpoch          int   // 0-based epoch training starts in
	StartStep           int   // steps of StartEpoch already done
	GlobalStep          int64 // optimizer steps done before this run
}

// StepInfo is reported after every optimizer step (OnStep).
type StepInfo struct {
	Epoch         int     // 0-based
	Step          int     // steps of this epoch done, 1..StepsPerEpoch
	StepsPerEpoch int     //
	GlobalStep    int64   // optimizer steps done in total
	Loss          float64 // the step's training loss, mean over ranks
}

// EpochMetrics are one epoch's results (OnEpoch, Result.Epochs). Times are
// seconds.
//
// The step-time breakdown is each rank's time summed over the epoch's
// steps, then averaged over ranks (the mean, so that the figures add up as
// one rank's do). In one step of one rank:
//
//   - Compute is the forward and backward pass (ddp's RunAll).
//   - CommWait (the exposed communication) is the time from the end of the
//     backward pass until the last gradient bucket's collective finished,
//     plus ZeRO-1's all-gather of the parameters in the optimizer step: the
//     time the step spent on nothing but communication, including waiting
//     in a collective for a slower rank.
//   - CommHidden is the time the bucket collectives ran while the backward
//     pass was still running (their spans, intersected with the pass).
//   - Comm = CommHidden + CommWait: the communication as the step sees it,
//     of which CommHidden overlapped the backward pass (CommOverlap).
//   - Optimizer is the optimizer's update of the parameters.
//
// Compute + CommWait + Optimizer is the step but for filling the batch;
// EpochSeconds / Steps is the whole step's wall time.
//
// A run stopped by MaxSteps inside an epoch reports that epoch too, marked
// Partial: its figures cover the steps run, and the test set is evaluated
// where training stopped.
type EpochMetrics struct {
	Epoch         int     `json:"epoch"`           // 1-based
	Partial       bool    `json:"partial"`         // stopped by MaxSteps inside the epoch
	Steps         int     `json:"steps"`           // optimizer steps run in this epoch by this process
	StepInEpoch   int     `json:"step_in_epoch"`   // steps of the epoch done: StepsPerEpoch unless Partial
	StepsPerEpoch int     `json:"steps_per_epoch"` //
	GlobalStep    int64   `json:"global_step"`     // after the epoch
	TrainLoss     float64 `json:"train_loss"`      // mean over the epoch's steps of the rank-averaged loss
	TestAccuracy  float64 `json:"test_accuracy"`   // fraction in [0, 1]
	TestLoss      float64 `json:"test_loss"`       // mean cross-entropy over the test set
	TestCorrect   int     `json:"test_correct"`
	TestCount     int     `json:"test_count"` // examples evaluated: the whole test set, each once

	SamplesPerSec float64 `json:"samples_per_sec"` // global training samples / EpochSeconds
	// SamplesUsed counts the training examples of the epoch's steps this
	// run completed, each step's whole global batch; SamplesDistinct how
	// many different examples those were: equal when none was used twice,
	// StepInEpoch × GlobalBatch when none was skipped (usage.go).
	SamplesUsed     int64   `json:"samples_used"`
	SamplesDistinct int64   `json:"samples_distinct"`
	EpochSeconds    float64 `json:"epoch_seconds"` // wall time of the epoch's training steps
	EvalSeconds     float64 `json:"eval_seconds"`  // wall time of the evaluation

	ComputeSeconds    float64 `json:"compute_seconds"`     // forward and backward
	CommWaitSeconds   float64 `json:"comm_wait_seconds"`   // exposed communication, after the backward pass
	CommHiddenSeconds float64 `json:"comm_hidden_seconds"` // communication during the backward pass
	CommSeconds       float64 `json:"comm_seconds"`        // CommHiddenSeconds + CommWaitSeconds
	OptimizerSeconds  float64 `json:"optimizer_seconds"`

	// The straggler: the rank that most often handed in its last gradient
	// bucket last, when significantly more often than chance (stragglers'
	// significant; else -1, as with one rank), the fraction of the epoch's
	// steps in which it did, and its median lag behind the rank before it
	// in those steps (ddp.WithArrivalStamps; clocks of ranks in other
	// processes aligned to rank 0's at start).
	SlowestRank      int     `json:"slowest_rank"`
	SlowestRankShare float64 `json:"slowest_rank_share"`
	SlowestRankLagMs float64 `json:"slowest_rank_lag_ms"`

	OptStateBytesPerRank int64 `json:"opt_state_bytes_per_rank"`
	CommBytesPerStep     int64 `json:"comm_bytes_per_step"`
	Ranks                int   `json:"ranks"`
	GlobalBatch          int   `json:"global_batch"`
}

// CommWaitFraction is CommWait as a fraction of the step time
// (compute + comm wait + optimizer).
func (m EpochMetrics) CommWaitFraction() float64 {
	total := m.ComputeSeconds + m.CommWaitSeconds + m.OptimizerSeconds
	if total <= 0 {
		return 0
	}
	return m.CommWaitSeconds / total
}

// CommOverlap is the fraction of the communication that the backward pass
// hid: CommHidden / Comm (0 without communication).
func (m EpochMetrics) CommOverlap() float64 {
	if m.CommSeconds <= 0 {
		return 0
	}
	return m.CommHiddenSeconds / m.CommSeconds
}

// CommBytesPerStep is what a ring (or direct two-shot) all-reduce of m
// bytes makes each of n ranks send: 2(n-1)/n · m (0 for one rank).
func CommBytesPerStep(m int64, n int) int64 {
	if n <= 1 {
		return 0
	}
	return 2 * int64(n-1) * m / int64(n)
}

// Stop says why a run ended.
type Stop string

// The ways a run ends.
const (
	StopDone        Stop = "done"        // trained all epochs
	StopMaxSteps    Stop = "max-steps"   // reached Config.MaxSteps
	StopInterrupted Stop = "interrupted" // the context was cancelled; the ranks agreed on a step to stop after
)

// Param is one parameter's final values (creation order in Result.Params).
type Param struct {
	Name  string
	Shape []int
	Data  []float64 // exact for float32 too
}

// Result is a finished (or stopped) run.
type Result struct {
	Epochs      []EpochMetrics // as reported to OnEpoch: a MaxSteps stop's partial epoch last
	Stop        Stop
	Epoch       int   // position: 0-based epoch to continue in
	StepInEpoch int   // steps of that epoch done
	GlobalStep  int64 // optimizer steps done in total
	Params      []Param
	Checkpoint  string // the last checkpoint written ("" none)
	// Rank is the rank this process ended as (its first endpoint's): with
	// Config.Survive the job's rank 0 may change when it is lost.
	Rank int
	// Generations are the group changes survived (Config.Survive).
	Generations []rendezvous.Generation
}
