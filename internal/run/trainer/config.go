package trainer

import (
	"context"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"errors"
	"fmt"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"math"
	"slices"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/datasets"
	"github.com/ringddp/ringddp/models"
	"github.com/ringddp/ringddp/numeric"
)

// Model, dtype and optimizer names accepted in Config.
const (
	ModelMLP = "mlp"
	ModelCNN = "cnn"

	Float32 = numeric.Float32
	Float64 = numeric.Float64

	OptimSGD   = "sgd"
	OptimAdam  = "adam"
	OptimAdamW = "adamw"
)

// Config is one training run. Fields are taken literally; start from
// DefaultConfig. Validate names the first invalid field.
type Config struct {
	Ranks  int    // world size: in-process ranks unless Connect says otherwise
	Model  string // ModelMLP or ModelCNN
	Hidden []int  // MLP hidden layer widths (nil: 256, 128); ignored for the CNN
	DType  string // Float32 or Float64

	Epochs      int // epochs to train to (a resumed run continues up to this many)
	GlobalBatch int // examples per optimizer step over all ranks, at least Ranks (split.go splits it)
	EvalBatch   int // rows of the per-rank evaluation graph (the last batch is padded)

	Optim       string  // OptimSGD, OptimAdam or OptimAdamW
	LR          float64 // learning rate (> 0); DefaultLR gives a per-optimizer, per-model default
	Momentum    float64 // SGD momentum (must be 0 for adam/adamw)
	WeightDecay float64 // SGD/Adam L2 penalty, AdamW decoupled decay

	BucketMB float64 // gradient bucket size in MiB (the first bucket is min(1 MiB, this))
	// Zero1 shards the optimizer state over ranks (ZeRO stage 1): buckets
	// are reduce-scattered, each rank updates its shard, parameters are
	// all-gathered. Checkpoints hold the full state either way.
	Zero1 bool
	// ZeroBuddies, with Zero1 on 2 or more ranks, has each rank also hold
	// another rank's shard state (its ring neighbour's, or across node
	// launchers the previous node's: BuddyNodes; zero.WrapWithBuddyAt), so that the
	// survivors of a failure (Survive) rebuild a lost rank's shard from its
	// buddy and keep every completed step (survive_zero.go).
	ZeroBuddies bool
	// BuddyNodes, with ZeroBuddies across node launchers, is the job's
	// nodes: Ranks ranks on each of up to Nodes nodes, this rank on node
	// Node. Each generation places the copies by its ranks' nodes
	// (zero.NodesOffset: the next node where the nodes hold equally many
	// ranks, the fewest on their rank's node otherwise), so that a node's
	// loss keeps every shard; zero: the ring neighbour.
	BuddyNodes struct{ Nodes, Ranks, Node int }
	// OverlapOptimizer updates each gradient bucket as soon as its
	// collective completes, inside the backward pass (PyTorch's optimizer
	// in backward; ddp.WithOptimizerInBackward), bitwise the same result.
	OverlapOptimizer bool
	// UnevenBatches makes the last rank run this many fewer steps per
	// epoch than the others and join (ddp.Joiner, PyTorch's Join; see
	// join.go): a test of uneven inputs. 0: every rank runs every step.
	UnevenBatches int
	// FindUnusedParameters completes the buckets of parameters that get
	// no gradient in a step with zero gradients instead of failing
	// (ddp.WithFindUnusedParameters, PyTorch's find_unused_parameters=True;
	// see unused.go): for a model whose steps leave parameters out.
	FindUnusedParameters bool
	// NewModel, when set, builds the model in place of Model's (Model
	// still names the run in checkpoints): in g, of dtype dt, initialised
	// from seed, for features inputs and classes outputs. A model with a
	// Skips method may leave parameters out of some steps (unused.go).
	NewModel func(g *G.ExprGraph, dt tensor.Dtype, seed int64, features, classes int) (models.Model, error)
	Seed     int64 // model initialisation and sampler shuffling seed

	// Compress is the gradient buckets' communication hook as
	// ddp.ParseCompress spells it ("" or "none": the plain all-reduce);
	// not with Zero1. CompressModel is the cost model "auto" prices the
	// link by (nil: the default for the group's shape).
	Compress      string
	CompressModel *cost.Model

	// DataDir is an MNIST-style IDX directory; "" is the bundled real
	// MNIST. Train and Test, when both set, are used instead.
	DataDir     string
	Train, Test *datasets.Dataset

	// GroupOptions configure every rank's communicator (the AllReduce
	// algorithm, the cost model Auto chooses by).
	GroupOptions []allreduce.GroupOption

	Checkpoint string // where rank 0 writes checkpoints ("" none): after every epoch and on stopping early
	// CheckpointEvery also writes one whenever the global step count is a
	// multiple of it inside an epoch (0: at epoch ends and stops only).
	CheckpointEvery int64
	// CheckpointKeep keeps this many checkpoints under step-stamped names
	// beside Checkpoint (StampedCheckpoint), the newest by step, so that a
	// checkpoint torn by a crash leaves an older one to resume from
	// (NewestCheckpoint); 0 keeps Checkpoint alone.
	CheckpointKeep int
	Resume         string // checkpoint to resume from ("" none)
	// JobID is the identity of the job this run belongs to, kept across
	// its resumes and restarts and written into every checkpoint
	// (job.go); "" writes none. At most MaxJobID printable bytes.
	JobID    string
	MaxSteps int64 // stop once the global step count reaches this (0: no limit)

	// Connect returns this process's transport endpoints of a world of
	// ranks ranks (one goroutine drives each); nil is an in-process world
	// of Ranks ranks with CommTimeout.
	Connect     func(ctx context.Context, ranks int) ([]transport.Conn, error)
	CommTimeout time.Duration // in-process transport timeout (0: its default, 30 s)
	// Survive, when set, keeps this process's rank training after a
	// peer fails: the group's next generation continues from memory
	// (survive.go). It needs one endpoint per process and DDP (ZeRO-1
	// falls back to a restart).
	Survive Survivor

	// Callbacks, all called on rank 0's goroutine (when this process holds
	// rank 0): once before training, after every step, after every
	// epoch's evaluation.
	OnStart func(Plan)
	OnStep  func(StepInfo)
	OnEpoch func(EpochMetrics)
	// OnSurvive is called on the new rank 0 when the survivors of a
	// failure (Survive) have agreed on the state: the generation, the
	// global step they go on from and, under ZeRO-1, the optimizer
	// state's bytes each rank sent to re-shard it over the survivors (nil
	// under DDP).
	OnSurvive func(g rendezvous.Generation, globalStep int64, reshardSent []int64)
	// OnHeal is called on rank 0 of a generation the launcher grew, once
	// the joined ranks are healed (survive_heal.go); on a joining rank
	// that is rank 0, too.
	OnHeal func(Healed)
	// OnCheckpoint is called on rank 0 after every checkpoint it writes.
	OnCheckpoint func(Checkpointed)
	// OnRankStep is called on every rank's goroutine after each of its
	// steps, with the rank (per-rank monitoring, fault injection in tests).
	OnRankStep func(rank int, s StepInfo)

	// Trace, when set, is where the run's timeline goes: a Chrome
	// trace-event file (internal/trace) with every rank's steps, buckets,
	// collectives, evaluation and checkpoints. A process that holds only
	// some ranks (a rank process under a launcher) writes
	// trace.RankFile(Trace, its lowest rank) for the launcher to merge.
	Trace string
}

// DefaultConfig is the MLP on real MNIST over 4 in-process ranks: 3
// epochs, global batch 256, SGD with lr 0.1 and momentum 0.9, 25 MiB
// buckets, evaluation in batches of 500.
func DefaultConfig() Config {
	return Config{
		Ranks: 4, Model: ModelMLP, DType: Float32,
		Epochs: 3, GlobalBatch: 256, EvalBatch: 500,
		Optim: OptimSGD, LR: DefaultLR(OptimSGD, ModelMLP), Momentum: DefaultMomentum(OptimSGD),
		WeightDecay: DefaultWeightDecay(OptimSGD),
		BucketMB:    25, Seed: 1,
	}
}

// DefaultLR is the default learning rate of an optimizer for a model:
// for SGD (with momentum 0.9) 0.1 for the MLP and 0.05 for the CNN, for
// Adam and AdamW 1e-3. Measured on MNIST with global batch 256, 3 epochs:
// the MLP reaches 97.9% with SGD 0.1; the CNN 98.8% with SGD 0.05 but
// only 97.8% with 0.1 (and 98.3% with Adam 1e-3).
func DefaultLR(opt, model string) float64 {
	switch {
	case opt != OptimSGD:
		return 1e-3
	case model == ModelCNN:
		return 0.05
	}
	return 0.1
}

// DefaultMomentum is 0.9 for SGD, 0 otherwise.
func DefaultMomentum(opt string) float64 {
	if opt == OptimSGD {
		return 0.9
	}
	return 0
}

// DefaultWeightDecay is 0.01 for AdamW (PyTorch's default), 0 otherwise.
func DefaultWeightDecay(opt string) float64 {
	if opt == OptimAdamW {
		return 0.01
	}
	return 0
}

// DefaultHidden are the MLP hidden widths used when Config.Hidden is nil.
func DefaultHidden() []int { return []int{256, 128} }

func (c Config) hidden() []int {
	if c.Model != ModelMLP {
		return nil
	}
	if c.Hidden == nil {
		return DefaultHidden()
	}
	return slices.Clone(c.Hidden)
}

func fieldErr(field string, v any, want string) error {
	return fmt.Errorf("trainer: %s = %v, want %s", field, v, want)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate checks every field and names the first invalid one.
func (c Config) Validate() error {
	switch {
	case c.Survive != nil && c.Zero1 && !c.ZeroBuddies:
		return errors.New("trainer: survivors of a ZeRO-1 run need buddies (zero-buddies): without them a lost rank's optimizer shard is gone and the run falls back to a checkpoint restart")
	case c.ZeroBuddies && !c.Zero1:
		return errors.New("trainer: zero-buddies applies to zero1 only (plain DDP holds the whole optimizer state on every rank)")
	case c.ZeroBuddies && c.OverlapOptimizer:
		return errors.New("trainer: zero-buddies and overlap-optimizer exclude each other: the buddy replays a shard's whole update after the reduce-scatter, which an update made bucket by bucket in backward does not leave to replay; turn one off")
	case c.Ranks < 1:
		return fieldErr("ranks", c.Ranks, "at least 1")
	case c.Model != ModelMLP && c.Model != ModelCNN:
		return fieldErr("model", fmt.Sprintf("%q", c.Model), `"mlp" or "cnn"`)
	case c.DType != Float32 && c.DType != Float64:
		return fieldErr("dtype", fmt.Sprintf("%q", c.DType), `"float32" or "float64"`)
	case c.Epochs < 1:
		return fieldErr("epochs", c.Epochs, "at least 1")
	case c.GlobalBatch < 1:
		return fieldErr("batch", c.GlobalBatch, "at least 1")
	case c.GlobalBatch < c.Ranks:
		return fmt.Errorf("trainer: batch = %d is smaller than ranks = %d: a rank would have no example", c.GlobalBatch, c.Ranks)
	case c.UnevenBatches > 0 && c.GlobalBatch%c.Ranks != 0:
		return fmt.Errorf("trainer: uneven-batches needs a batch (%d) that ranks (%d) divide", c.GlobalBatch, c.Ranks)
	case c.EvalBatch < 1:
		return fieldErr("eval-batch", c.EvalBatch, "at least 1")
	case c.Optim != OptimSGD && c.Optim != OptimAdam && c.Optim != OptimAdamW:
		return fieldErr("optim", fmt.Sprintf("%q", c.Optim), `"sgd", "adam" or "adamw"`)
	case !(c.LR > 0) || !finite(c.LR):
		return fieldErr("lr", c.LR, "> 0 and finite")
	case !(c.Momentum >= 0) || !finite(c.Momentum):
		return fieldErr("momentum", c.Momentum, ">= 0 and finite")
	case c.Momentum != 0 && c.Optim != OptimSGD:
		return fmt.Errorf("trainer: momentum = %v is only for sgd (optim = %q)", c.Momentum, c.Optim)
	case !(c.WeightDecay >= 0) || !finite(c.WeightDecay):
		return fieldErr("weight-decay", c.WeightDecay, ">= 0 and finite")
	case !(c.BucketMB > 0) || !finite(c.BucketMB) || c.BucketMB > 1<<20:
		return fieldErr("bucket-mb", c.BucketMB, "> 0 (MiB)")
	case c.UnevenBatches < 0:
		return fieldErr("uneven-batches", c.UnevenBatches, ">= 0")
	case c.UnevenBatches > 0 && (c.ZeroBuddies || c.CheckpointEvery > 0):
		return fmt.Errorf("trainer: uneven-batches needs checkpoints at epoch ends only and no ZeRO-1 buddies (not checkpoint-every or zero-buddies)")
	case c.UnevenBatches > 0 && c.Zero1 && c.OverlapOptimizer:
		return fmt.Errorf("trainer: uneven-batches with zero1 needs the optimizer after backward (not overlap-optimizer): a shadowed step updates the shard itself")
	case c.MaxSteps < 0:
		return fieldErr("max-steps", c.MaxSteps, ">= 0")
	case c.CheckpointEvery < 0:
		return fieldErr("checkpoint-every", c.CheckpointEvery, ">= 0")
	case c.CheckpointKeep < 0:
		return fieldErr("checkpoint-keep", c.CheckpointKeep, ">= 0")
	case (c.CheckpointEvery > 0 || c.CheckpointKeep > 0) && c.Checkpoint == "":
		return fmt.Errorf("trainer: checkpoint-every = %d and checkpoint-keep = %d need a checkpoint path", c.CheckpointEvery, c.CheckpointKeep)
	case CheckJobID(c.JobID) != nil:
		return fmt.Errorf("trainer: job id: %w", CheckJobID(c.JobID))
	case (c.Train == nil) != (c.Test == nil):
		return fmt.Errorf("trainer: Train and Test must be set together")
	}
	if err := c.checkCompress(); err != nil {
		return err
	}
	for i, h := range c.Hidden {
		if h < 1 {
			return fieldErr(fmt.Sprintf("hidden[%d]", i), h, "at least 1")
		}
	}
	return nil
}

// bucketBytes returns the first and the other buckets' byte limits.
func (c Config) bucketBytes() (first, rest int) {
	rest = int(c.BucketMB * (1 << 20))
	rest = max(rest, 1)
	return min(1<<20, rest), rest
}
