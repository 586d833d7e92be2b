package trainer

import (
	"errors"
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/graphlock"
)

// Unused parameters. A model whose steps may leave some of its parameters
// out (a layer dropped on some steps: models.SkipMLP) says so by a Skips
// method, which the worker calls before every step with the global step
// and the rank: it readies the model for the step and returns the indices
// (in Learnables) of the parameters the step leaves out. gorgonia's graphs
// are static, so the step is run by a machine compiled on the loss and
// every gradient but those (compiled at the first step that leaves out
// that set, kept for the others): the left-out parameters get no gradient,
// and ddp finds them at the end of the backward pass. With
// Config.FindUnusedParameters (ddp.WithFindUnusedParameters, PyTorch's
// find_unused_parameters=True) their buckets are completed with zero
// gradients and training goes on; without it the step fails on every rank
// within the communication timeout (the rank that found them aborts the
// group), naming the parameters and find-unused-parameters.

// skipper is a model whose steps may leave parameters out.
type skipper interface {
	Skips(step int64, rank int) ([]int, error)
}

// machines is a worker's training machines: the whole step's, and one per
// set of parameters a step left out.
type machines struct {
	full    G.VM
	skip    skipper         // nil: every step uses every parameter
	partial map[string]G.VM // by the left-out indices, "[2 3]"
	outputs func() G.Nodes  // the loss and every parameter's gradient (ddp.DDP.Outputs)
	graph   *G.ExprGraph
}

// forStep readies the model for the step at global and returns the
// machine that runs it.
func (m *machines) forStep(global int64, rank int) (G.VM, error) {
	if m.skip == nil {
		return m.full, nil
	}
	left, err := m.skip.Skips(global, rank)
	if err != nil || len(left) == 0 {
		return m.full, err
	}
	key := fmt.Sprint(left)
	if vm, ok := m.partial[key]; ok {
		return vm, nil
	}
	outs := m.outputs()
	for _, i := range left {
		if i < 0 || i >= len(outs)-1 {
			return nil, fmt.Errorf("trainer: the model's step %d leaves out parameter %d of %d", global, i, len(outs)-1)
		}
	}
	roots := G.Nodes{outs[0]}
	for i, gr := range outs[1:] {
		if !slices.Contains(left, i) {
			roots = append(roots, gr)
		}
	}
	var vm G.VM
	if err := graphlock.Do(func() error {
		vm = G.NewTapeMachine(m.graph.SubgraphRoots(roots...))
		return nil
	}); err != nil {
		return nil, err
	}
	if m.partial == nil {
		m.partial = map[string]G.VM{}
	}
	m.partial[key] = vm
	return vm, nil
}

// close closes the machines that leave parameters out (the full one is
// the worker's).
func (m *machines) close() {
	for _, vm := range m.partial {
		_ = vm.Close()
	}
}

// unusedHint adds the trainer's name of the option to ddp's error about
// parameters that got no gradient.
func unusedHint(err error) error {
	if errors.Is(err, ddp.ErrUnusedParameters) {
		return fmt.Errorf("%w (train with find-unused-parameters: cmd/train -find-unused-parameters)", err)
	}
	return err
}
