package ddp

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/graphlock"
	"github.com/ringddp/ringddp/internal/tapevm"
	"github.com/ringddp/ringddp/numeric"
)

// Float is the parameter element type: float32 or float64 (numeric.Float).
type Float = numeric.Float

// Optimizer is what Step needs of an optimizer: an update of flat
// parameters from flat gradients of the same layout (optim's optimizers).
type Optimizer[T Float] interface {
	Step(params, grads []T) error
}

// Option configures Wrap.
type Option func(*config)

type config struct {
	firstBucketBytes int
	bucketBytes      int
	checkEvery       int
	collective       any          // BucketCollective[T] or nil
	hook             any          // CommHook[T] or nil (hook.go)
	vote             func() bool  // WithAgreement's stop vote; nil without it
	stampNow         func() int64 // WithArrivalStamps' clock; nil without it
	observer         Observer
	collectiveName   string
	ext              extConfig // optimizer in backward, unused parameters
}

// BucketCollective communicates one complete bucket, the element range
// [lo, hi) of the gradient arena grads, over group. The default all-reduces
// it with Avg; ZeRO-1 reduce-scatters it instead.
type BucketCollective[T Float] func(ctx context.Context, group *allreduce.Group, grads []T, lo, hi int) error

// WithBucketCollective replaces the all-reduce of each bucket.
func WithBucketCollective[T Float](f BucketCollective[T]) Option {
	return func(c *config) { c.collective = f }
}

// WithBucketBytes sets the size limit of the first bucket and of the others
// (PyTorch's defaults: 1 MiB and 25 MiB).
func WithBucketBytes(first, rest int) Option {
	return func(c *config) { c.firstBucketBytes, c.bucketBytes = first, rest }
}

// WithReplicaCheck makes Step verify every k steps that all ranks hold
// bitwise identical parameters (a hash compared over all ranks); 0 turns
// it off (the default).
func WithReplicaCheck(k int) Option { return func(c *config) { c.checkEvery = k } }

// DDP is a wrapped model replica on one rank.
type DDP[T Float] struct {
	group   *allreduce.Group
	params  G.Nodes // the wrapped parameters, creation order
	tapped  G.Nodes // what the forward pass uses instead
	slots   []slot
	buckets []bucketRange
	cfg     config
	reduce  BucketCollective[T] // nil: the default all-reduce (Avg)
	loss    *G.Node             // the node given to Backward
	grads   G.Nodes             // the parameters' gradient nodes, from Backward

	paramArena []T
	gradArena  []T // len(paramArena) elements of commArena
	// commArena is gradArena followed by the agreement's values (see
	// agree.go): the last bucket's collective carries both.
	commArena []T
	extras    []T // commArena's tail: nothing without WithAgreement
	agreed    Agreement
	counts    []int   // scratch: the last bucket's chunk layout (ringWithExtras)
	arrivals  []int64 // the last Run's arrival stamps by rank (WithArrivalStamps)

	// Per step. The hooks run on the machine's goroutine; the bucket
	// channels hand complete buckets to the communication goroutine.
	remaining    []int
	ready        []chan struct{} // capacity 1 per bucket
	hookErr      error
	noSync       bool
	accumulating bool // the gradient arena holds a NoSync partial sum
	syncing      bool // the running step all-reduces
	arrived      []bool
	steps        int64
	// firstHandedOff is set once a bucket went to communication this step;
	// hooksAfterFirst counts the gradients that arrived after that.
	firstHandedOff  bool
	hooksAfterFirst int
	firstHook       time.Time // when the step's first gradient arrived

	stepper BucketStepper // WithOptimizerInBackward; nil without it
	unused  []int         // the last Run's parameters without a gradient
	updated bool          // the last Run applied the stepper (Step counts it)

	// rewind is 0 until the first Run, then 1 when the graph may be rewound
	// (tapevm.Safe) and 2 when the machine must be Reset.
	rewind uint8

	statsMu sync.Mutex
	last    StepStats
	order   []int // parameter indices in hook firing order, last Run
}

// StepStats is the time breakdown of the last Run and Step.
type StepStats struct {
	Start   time.Time     // when RunAll began
	Compute time.Duration // vm.RunAll: forward and backward
	// Forward is the part of Compute before the first gradient arrived:
	// the forward pass and the start of the backward pass to the first
	// parameter's gradient (Compute without synchronised gradients).
	Forward  time.Duration
	CommWait time.Duration // waiting for all-reduce after RunAll returned: communication not hidden by the backward pass
	// Optimizer is the optimizer's time not overlapped with communication:
	// Step's update, or with WithOptimizerInBackward the updates that ran
	// after the last bucket's collective ended.
	Optimizer time.Duration
	// OptimizerTotal is the time spent in the optimizer in all (with
	// WithOptimizerInBackward, mostly overlapping the collectives).
	OptimizerTotal time.Duration
	// OptimizerExposed is the time from the end of the last bucket's
	// collective to the end of Step: the optimizer (and whatever the
	// caller did between Run and Step) that no communication hid.
	OptimizerExposed time.Duration
	// CommEnd is when the last bucket's collective ended (zero if none).
	CommEnd time.Time
	// FirstBucketStart is when the first bucket's all-reduce began,
	// measured from the start of RunAll; it is less than Compute when
	// communication overlaps the backward pass. Negative if none ran.
	FirstBucketStart time.Duration
	// HooksAfterFirstBucket counts the gradients that arrived after the
	// first bucket was handed to communication: more than zero means the
	// hand-off happened mid-backward.
	HooksAfterFirstBucket int
	Buckets               int
	BucketBytes           int64 // gradient bytes communicated (M)
	// Comm is the time the bucket collectives took in all, from each
	// one's start to its end, whether it overlapped the backward pass or
	// not: Comm - CommWait of it was hidden.
	Comm time.Duration
}

// Wrap makes params (a model's learnables, creation order) data-parallel
// over group: it checks that every rank has the same parameter shapes,
// moves the parameters into a flat arena (rebinding each node's value to a
// view of it), broadcasts rank 0's values, and makes the tapped nodes the
// forward pass must use instead of params (see Tapped).
func Wrap[T Float](ctx context.Context, group *allreduce.Group, params G.Nodes, opts ...Option) (*DDP[T], error) {
	cfg := config{firstBucketBytes: DefaultFirstBucketBytes, bucketBytes: DefaultBucketBytes}
	for _, o := range opts {
		o(&cfg)
	}
	if group == nil {
		return nil, errors.New("ddp: nil group")
	}
	if cfg.checkEvery < 0 {
		return nil, fmt.Errorf("ddp: replica check interval %d is negative", cfg.checkEvery)
	}
	var reduce BucketCollective[T]
	if cfg.collective != nil {
		f, ok := cfg.collective.(BucketCollective[T])
		if !ok {
			return nil, fmt.Errorf("ddp: bucket collective %T does not match the wrapper's element type", cfg.collective)
		}
		reduce = f
	}
	values, err := paramValues[T](params)
	if err != nil {
		return nil, err
	}
	if err := checkSameShapes(ctx, group, values); err != nil {
		return nil, err
	}
	var z T
	es := int(unsafe.Sizeof(z))
	sizes := make([]int, len(values))
	for i, v := range values {
		sizes[i] = v.Shape().TotalSize()
	}
	slots, buckets, err := planLayout(sizes, max(1, cfg.firstBucketBytes/es), max(1, cfg.bucketBytes/es))
	if err != nil {
		return nil, err
	}
	d := &DDP[T]{group: group, params: append(G.Nodes(nil), params...), slots: slots, buckets: buckets, cfg: cfg, reduce: reduce}
	if cfg.hook != nil {
		if d.reduce, err = d.hookCollective(cfg.hook); err != nil {
			return nil, err
		}
	}
	total := 0
	for _, s := range slots {
		total += s.size
	}
	d.paramArena = make([]T, total)
	extra := 0
	if cfg.vote != nil {
		extra = agreementValues
		if cfg.stampNow != nil {
			extra += stampSlots * group.Size()
		}
	}
	d.commArena = make([]T, total+extra)
	d.gradArena = d.commArena[:total:total]
	d.extras = d.commArena[total:]
	for i, v := range values {
		s := slots[i]
		view := d.paramArena[s.offset : s.offset+s.size : s.offset+s.size]
		if err := copyInto(view, v); err != nil {
			return nil, fmt.Errorf("ddp: parameter %d (%s): %w", i, params[i].Name(), err)
		}
		if err := G.Let(params[i], tensor.New(tensor.WithShape(v.Shape().Clone()...), tensor.WithBacking(view))); err != nil {
			return nil, fmt.Errorf("ddp: rebinding parameter %d (%s) to the arena: %w", i, params[i].Name(), err)
		}
	}
	if err := allreduce.Broadcast(ctx, group, d.paramArena, 0); err != nil {
		return nil, fmt.Errorf("ddp: broadcasting rank 0's parameters: %w", err)
	}
	if err := d.setupStepper(); err != nil {
		return nil, err
	}
	d.remaining = make([]int, len(buckets))
	d.ready = make([]chan struct{}, len(buckets))
	for b := range d.ready {
		d.ready[b] = make(chan struct{}, 1)
	}
	d.arrived = make([]bool, len(params))
	if cfg.vote != nil && cfg.stampNow != nil {
		d.arrivals = make([]int64, group.Size())
	}
	id := uint64(uintptr(unsafe.Pointer(d)))
	err = graphlock.Do(func() error {
		d.tapped = make(G.Nodes, len(params))
		for i, p := range params {
			t, err := newTap(&tapOp{index: i, sink: d, id: id}, p)
			if err != nil {
				return fmt.Errorf("ddp: tapping parameter %d (%s): %w", i, p.Name(), err)
			}
			d.tapped[i] = t
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Tapped returns the nodes the forward pass must use in place of the
// wrapped parameters, in the same order.
func (d *DDP[T]) Tapped() G.Nodes { return append(G.Nodes(nil), d.tapped...) }

// Params returns the wrapped parameter nodes.
func (d *DDP[T]) Params() G.Nodes { return append(G.Nodes(nil), d.params...) }

// Group is the communicator.
func (d *DDP[T]) Group() *allreduce.Group { return d.group }

// ParamArena is the flat parameter arena (reverse creation order of the
// parameters; see Offsets). Writes to it are what the model computes with.
func (d *DDP[T]) ParamArena() []T { return d.paramArena }

// GradArena is the flat gradient arena, same layout as ParamArena: after
// Run, the gradient averaged over ranks.
func (d *DDP[T]) GradArena() []T { return d.gradArena }

// Offset returns parameter i's element range [lo, hi) in the arenas.
func (d *DDP[T]) Offset(i int) (lo, hi int) {
	s := d.slots[i]
	return s.offset, s.offset + s.size
}

// BucketRanges returns each bucket's element range in the arenas.
func (d *DDP[T]) BucketRanges() [][2]int {
	out := make([][2]int, len(d.buckets))
	for i, b := range d.buckets {
		out[i] = [2]int{b.lo, b.hi}
	}
	return out
}

// Backward adds the backward pass of loss to the graph, with a gradient
// hook on every wrapped parameter. Call it once, after building the
// forward pass from Tapped and before making the machine. loss must be a
// scalar (WithAgreement averages its value over ranks).
func (d *DDP[T]) Backward(loss *G.Node) error {
	if loss == nil {
		return errors.New("ddp: backward of a nil loss")
	}
	d.loss = loss
	return graphlock.Do(func() error {
		if err := joinTaps(d.params, d.tapped); err != nil {
			return err
		}
		grads, err := G.Grad(loss, d.params...)
		if err != nil {
			return fmt.Errorf("ddp: backward: %w", err)
		}
		if len(grads) != len(d.params) {
			return fmt.Errorf("ddp: backward gave %d gradients for %d parameters", len(grads), len(d.params))
		}
		d.grads = grads
		return nil
	})
}

// Outputs returns the nodes a step computes for DDP after Backward: the
// loss, then each parameter's gradient (whose hooks hand it to the
// buckets), in a fresh slice. A tape machine compiled on the subgraph of
// these roots (and of whatever else the caller reads), as in
//
//	vm := G.NewTapeMachine(g.SubgraphRoots(d.Outputs()...))
//
// computes only what they need: gorgonia's Grad also builds the gradient
// of every other input of the model, the data batch included (for an MLP
// the largest matrix product of the backward pass), which a machine
// compiled on the whole graph computes every step and nobody reads.
func (d *DDP[T]) Outputs() G.Nodes {
	if d.loss == nil {
		return nil
	}
	return append(G.Nodes{d.loss}, d.grads...)
}

// NoSync runs fn with gradient synchronisation off, like PyTorch's
// no_sync: the Runs inside fn accumulate gradients locally without
// communication, and the first Run after it adds its gradients to the
// accumulated ones and all-reduces the sum.
func (d *DDP[T]) NoSync(fn func() error) error {
	prev := d.noSync
	d.noSync = true
	defer func() { d.noSync = prev }()
	return fn()
}

// rewindOrReset readies vm for the next run: tapevm.Rewind when every op
// of the loss's graph is one it runs correctly (decided at the first Run,
// when the graph is complete), Reset otherwise.
func (d *DDP[T]) rewindOrReset(vm Machine) {
	if d.rewind == 0 {
		d.rewind = 2
		if d.loss != nil {
			if ok, _ := tapevm.Safe(d.loss.Graph()); ok {
				d.rewind = 1
			}
		}
	}
	if d.rewind == 1 {
		tapevm.Rewind(vm)
		return
	}
	vm.Reset()
}

// Machine is what Run needs of a gorgonia VM.
type Machine interface {
	RunAll() error
	Reset()
}

// Run resets vm (or rewinds it, keeping its intermediate values, when the
// graph has only ops that tapevm.Safe lists) and runs the forward and backward passes. Buckets are
// all-reduced (Avg) as their gradients arrive; Run returns when all of them
// are done, with GradArena holding the averaged gradient (and, with
// WithAgreement, Agreed what the last bucket carried).
//
// The buckets but the last are communicated by a goroutine of their own
// while the backward pass runs. The last bucket is complete only when the
// backward pass is (it holds the first layers), so Run communicates it
// itself once vm.RunAll has returned and the goroutine is done, and applies
// the optimizer in backward's last spans there too: no goroutine has to be
// woken between the last gradient and the collective, nor between the
// collective's end and Run's return.
func (d *DDP[T]) Run(ctx context.Context, vm Machine) error {
	d.beginStep()
	start := time.Now()
	stats := StepStats{FirstBucketStart: -1}
	abort := make(chan struct{})
	upd, err := d.startUpdates()
	if err != nil {
		d.group.Abort(fmt.Errorf("rank %d: %w", d.group.Rank(), err)) // the peers wait for this rank's buckets
		return err
	}
	last := len(d.buckets) - 1
	var done chan error
	if d.syncing && last > 0 {
		done = make(chan error, 1)
		go func() { done <- d.reducePrefix(ctx, last, start, &stats, upd, abort) }()
	}
	d.rewindOrReset(vm)
	runErr := vm.RunAll()
	computed := time.Now()
	if runErr == nil && d.hookErr != nil {
		runErr = d.hookErr
	}
	if runErr == nil {
		runErr = d.settleUnused()
	}
	if runErr != nil {
		close(abort)
		if d.syncing {
			// Peers are waiting for this rank's buckets: fail them now.
			d.group.Abort(fmt.Errorf("rank %d: forward/backward failed: %w", d.group.Rank(), runErr))
		}
	}
	var commErr error
	if done != nil {
		commErr = <-done
	}
	if d.syncing && last >= 0 && runErr == nil && commErr == nil {
		commErr = d.reduceLastBucket(ctx, start, &stats, upd)
	}
	if upd != nil {
		commErr = d.finishUpdates(upd, &stats, commErr)
	}
	waited := time.Now()
	if runErr == nil && commErr == nil {
		runErr = d.settleAgreement()
	}
	d.accumulating = !d.syncing
	stats.Start = start
	stats.Compute = computed.Sub(start)
	stats.Forward = stats.Compute
	if !d.firstHook.IsZero() {
		stats.Forward = d.firstHook.Sub(start)
	}
	stats.HooksAfterFirstBucket = d.hooksAfterFirst
	stats.CommWait = waited.Sub(computed)
	d.statsMu.Lock()
	d.last = stats
	d.statsMu.Unlock()
	if runErr != nil {
		return fmt.Errorf("ddp: forward/backward: %w", runErr)
	}
	return commErr
}

func (d *DDP[T]) beginStep() {
	d.syncing = !d.noSync
	d.hookErr = nil
	d.agreed = Agreement{}
	d.order = d.order[:0]
	d.firstHandedOff, d.hooksAfterFirst = false, 0
	d.firstHook = time.Time{}
	for b, r := range d.buckets {
		d.remaining[b] = r.params
		select {
		case <-d.ready[b]:
		default:
		}
	}
	for i := range d.arrived {
		d.arrived[i] = false
	}
}

// gradReady is the hook: parameter i's gradient is complete.
func (d *DDP[T]) gradReady(i int, v G.Value) error {
	if i < 0 || i >= len(d.slots) {
		return fmt.Errorf("ddp: hook for unknown parameter %d", i)
	}
	if d.arrived[i] {
		return fmt.Errorf("ddp: gradient of parameter %d (%s) arrived twice in one step", i, d.params[i].Name())
	}
	d.arrived[i] = true
	if len(d.order) == 0 {
		d.firstHook = time.Now()
	}
	s := d.slots[i]
	dst := d.gradArena[s.offset : s.offset+s.size]
	if err := accumulateInto(dst, v, d.accumulating); err != nil {
		d.hookErr = fmt.Errorf("ddp: gradient of parameter %d (%s): %w", i, d.params[i].Name(), err)
		return d.hookErr
	}
	d.order = append(d.order, i)
	// Let another rank run: with more in-process ranks than cores, ranks
	// that run their whole backward pass in one time slice finish in
	// pairs and the early ones wait for the late ones; yielding once per
	// gradient interleaves them layer by layer. Nearly free otherwise.
	runtime.Gosched()
	if d.firstHandedOff {
		d.hooksAfterFirst++
	}
	return d.arrival(i)
}

// arrival counts parameter i's gradient in its bucket and, when that
// completes the bucket of a synchronised Run, hands it to communication.
func (d *DDP[T]) arrival(i int) error {
	s := d.slots[i]
	if d.syncing {
		d.remaining[s.bucket]--
		if d.remaining[s.bucket] == 0 {
			if s.bucket == len(d.buckets)-1 {
				// The last bucket carries the agreement's values.
				if err := d.fillAgreement(); err != nil {
					d.hookErr = err
					return err
				}
				if d.arrivals != nil {
					d.writeStamp() // the moment this rank hands in its last bucket
				}
			}
			if o := d.cfg.observer; o != nil {
				var z T
				r := d.buckets[s.bucket]
				o.BucketReady(s.bucket, (r.hi-r.lo)*int(unsafe.Sizeof(z)), time.Now())
			}
			d.ready[s.bucket] <- struct{}{} // capacity 1, sent once per step: never blocks
			d.firstHandedOff = true
		}
	}
	return nil
}

// Steps is the number of optimizer steps taken.
func (d *DDP[T]) Steps() int64 { return d.steps }

// LastStats is the breakdown of the last Run and Step.
func (d *DDP[T]) LastStats() StepStats {
	d.statsMu.Lock()
	defer d.statsMu.Unlock()
	return d.last
}

// HookOrder is the order in which parameter gradients arrived in the last
// Run (parameter indices).
func (d *DDP[T]) HookOrder() []int { return append([]int(nil), d.order...) }
