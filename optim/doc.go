// Package optim holds first-order optimizers — SGD (momentum, dampening,
// Nesterov, weight decay), Adam and AdamW — that update flat parameter slices
// in place from flat gradient slices, with exactly the per-element arithmetic
// of torch.optim.SGD, torch.optim.Adam and torch.optim.AdamW (single-tensor,
// non-foreach path).
//
// # Flat slices and shards
//
// An optimizer sees only two []T of equal length: the parameters and their
// gradients. They may be a whole parameter arena or any contiguous shard
// [lo,hi) of it: every update is element-wise, and the only state shared
// between elements is the step count and the hyper-parameters. So running one
// optimizer per shard, each with its own state, gives bitwise the same
// parameters as one optimizer over the whole arena. That is how ZeRO-1 runs
// it: rank r steps only the chunk of the arena it owns.
//
// The per-element state is allocated once, at the first Step, sized to
// len(params); from then on every Step must get slices of that length and does
// not allocate. Optimizers are not safe for concurrent use.
//
// Arithmetic is done in T, as PyTorch does for float32 and float64 tensors:
// per-step scalars (bias corrections, step size, 1-beta, …) are computed in
// float64 and converted to T once per Step; the element-wise work is in T.
//
// # State layout
//
// State() returns a self-describing, serialisable snapshot (encoding/gob and
// encoding/json both round-trip it exactly; JSON cannot hold NaN or ±Inf):
//
//	Optimizer  "sgd" | "adam" | "adamw"   (Name())
//	DType      "float32" | "float64"      (the T the buffers were held in)
//	Step       number of completed steps (PyTorch's state["step"])
//	Len        number of elements covered; 0 before the first step
//	Hyper      ordered {Name, Value} pairs:
//	             sgd:        lr, momentum, dampening, weight_decay, nesterov (0 or 1)
//	             adam/adamw: lr, beta1, beta2, eps, weight_decay
//	Buffers    ordered {Name, Data []float64}, each len(Data) == Len, element i
//	           belonging to params[i]:
//	             sgd:        momentum_buffer (only when momentum != 0 and Step > 0)
//	             adam/adamw: exp_avg, exp_avg_sq (only when Step > 0)
//
// Buffers are stored as float64; a float32 value converts to float64 and back
// losslessly, so State/LoadState round-trips bitwise for both element types.
// A state taken before the first step (Step == 0) has Len == 0 and no buffers.
//
// Because element i of every buffer belongs to parameter i, a state is cut and
// glued like the arena itself: ConcatStates joins the states of consecutive
// shards (rank order) into the state of the whole arena, and SliceState cuts
// [lo,hi) out of it, so a checkpoint written by N ranks can be resumed by M.
package optim
