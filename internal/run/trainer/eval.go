package trainer

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/datasets"
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/graphlock"
	"github.com/ringddp/ringddp/internal/tapevm"
)

// evaluator is one rank's forward-only graph over its shard [lo, hi) of
// the test set. The model's parameters are views of the ddp parameter
// arena, so evaluation always sees the current values.
type evaluator[T Float] struct {
	test    *datasets.Dataset
	lo, hi  int
	batch   int
	classes int
	x       []T
	idx     []int
	vm      G.VM
	rewind  bool // tapevm.Safe(graph): rewind the machine instead of Reset
	logits  *G.Node
}

func newEvaluator[T Float](cfg Config, d *ddp.DDP[T], test *datasets.Dataset, lo, hi int) (*evaluator[T], error) {
	e := &evaluator[T]{test: test, lo: lo, hi: hi, classes: test.Classes()}
	// A batch no larger than the shard (at least 1 row): padding stays small.
	e.batch = max(1, min(cfg.EvalBatch, hi-lo))
	dt := dtypeOf[T]()
	features := test.Features()
	graph := G.NewGraph()
	model, err := newModel(graph, cfg, dt, features, e.classes)
	if err != nil {
		return nil, fmt.Errorf("trainer: evaluation model: %w", err)
	}
	params := model.Learnables()
	arena := d.ParamArena()
	for i, p := range params {
		plo, phi := d.Offset(i)
		view := tensor.New(tensor.WithShape(p.Shape().Clone()...), tensor.WithBacking(arena[plo:phi:phi]))
		if err := G.Let(p, view); err != nil {
			return nil, fmt.Errorf("trainer: binding evaluation parameter %d (%s) to the arena: %w", i, p.Name(), err)
		}
	}
	e.x = make([]T, e.batch*features)
	e.idx = make([]int, 0, e.batch)
	var x *G.Node
	_ = graphlock.Do(func() error {
		x = G.NewMatrix(graph, dt, G.WithShape(e.batch, features), G.WithName("x"),
			G.WithValue(tensor.New(tensor.WithShape(e.batch, features), tensor.WithBacking(e.x))))
		return nil
	})
	if e.logits, err = model.Forward(x, params); err != nil {
		return nil, fmt.Errorf("trainer: evaluation forward: %w", err)
	}
	_ = graphlock.Do(func() error { e.vm = G.NewTapeMachine(graph); return nil })
	e.rewind, _ = tapevm.Safe(graph)
	return e, nil
}

// run evaluates the shard: the number of correct predictions, the sum of
// the per-example cross-entropy losses, and the number of examples.
func (e *evaluator[T]) run() (correct int, lossSum float64, count int, err error) {
	features := e.test.Features()
	for start := e.lo; start < e.hi; start += e.batch {
		n := min(e.batch, e.hi-start)
		e.idx = e.idx[:0]
		for i := start; i < start+n; i++ {
			e.idx = append(e.idx, i)
		}
		if err := fill(e.test, e.idx, e.x[:n*features], nil); err != nil {
			return 0, 0, 0, fmt.Errorf("trainer: evaluation: %w", err)
		}
		clear(e.x[n*features:]) // padding rows: computed, never counted
		if e.rewind {
			tapevm.Rewind(e.vm)
		} else {
			e.vm.Reset()
		}
		if err := e.vm.RunAll(); err != nil {
			return 0, 0, 0, fmt.Errorf("trainer: evaluation forward: %w", err)
		}
		data, ok := e.logits.Value().Data().([]T)
		if !ok || len(data) < n*e.classes {
			return 0, 0, 0, fmt.Errorf("trainer: evaluation logits are %T", e.logits.Value().Data())
		}
		for r := 0; r < n; r++ {
			row := data[r*e.classes : (r+1)*e.classes]
			label := e.test.Label(e.idx[r])
			best := 0
			mx := float64(row[0])
			for j, v := range row {
				if float64(v) > mx {
					mx, best = float64(v), j
				}
			}
			if best == label {
				correct++
			}
			sum := 0.0
			for _, v := range row {
				sum += math.Exp(float64(v) - mx)
			}
			lossSum += mx + math.Log(sum) - float64(row[label])
		}
		count += n
	}
	return correct, lossSum, count, nil
}
