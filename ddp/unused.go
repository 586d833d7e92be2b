package ddp

import (
	"errors"
	"fmt"
	"strings"
)

// Unused parameters (PyTorch: find_unused_parameters=True). A parameter is
// unused in a step when the step's backward pass computes no gradient for
// it: a branch of the model the step skipped, here a machine compiled on a
// subgraph that leaves the branch out. Its hook never runs, its bucket
// would never be complete, and the peers would wait for it. So at the end
// of every backward pass:
//
//   - with WithFindUnusedParameters, each parameter whose gradient did not
//     arrive is marked ready with a zero gradient (added to what NoSync
//     accumulated), which completes its bucket, and the buckets all-reduce
//     as usual; LastUnused names them;
//   - without it, Run fails naming the parameters (PyTorch's "Expected to
//     have finished reduction in the prior iteration ... find_unused_parameters=True"
//     error is the reference) and aborts the group, so the peers fail at
//     once instead of waiting.
//
// PyTorch traverses the autograd graph after the forward pass to find
// them and can hand their buckets off before the backward pass; here the
// graph is static per machine and the search is the list of hooks that did
// not run, so a bucket holding an unused parameter goes to communication
// when the backward pass ends. Unlike PyTorch, whose optimizer skips a
// parameter left without a gradient on every rank (its .grad stays None),
// the flat arena's optimizer updates it with the zero gradient, so
// momentum and weight decay still move it.

// ErrUnusedParameters is wrapped by Run's error when a step left
// parameters without a gradient and WithFindUnusedParameters is off.
var ErrUnusedParameters = errors.New("parameters that got no gradient in this step, not used in producing the loss")

// WithFindUnusedParameters makes Run mark the parameters that got no
// gradient in a step ready with a zero gradient, instead of failing
// (PyTorch's find_unused_parameters=True).
func WithFindUnusedParameters() Option { return func(c *config) { c.ext.findUnused = true } }

// LastUnused returns the indices (creation order) of the parameters that
// got no gradient in the last Run (WithFindUnusedParameters), in a fresh
// slice; nil when every parameter was used.
func (d *DDP[T]) LastUnused() []int { return append([]int(nil), d.unused...) }

// settleUnused ends the backward pass of a Run: every parameter's gradient
// must have arrived, or, with WithFindUnusedParameters, the missing ones
// are marked ready with a zero gradient.
func (d *DDP[T]) settleUnused() error {
	d.unused = d.unused[:0]
	for i, ok := range d.arrived {
		if !ok {
			d.unused = append(d.unused, i)
		}
	}
	if len(d.unused) == 0 {
		return nil
	}
	if !d.cfg.ext.findUnused {
		return d.unusedError()
	}
	for _, i := range d.unused {
		s := d.slots[i]
		if !d.accumulating {
			clear(d.gradArena[s.offset : s.offset+s.size])
		}
		d.arrived[i] = true
		if err := d.arrival(i); err != nil {
			return err
		}
	}
	return nil
}

// unusedError names the parameters that got no gradient, like PyTorch's
// error without find_unused_parameters.
func (d *DDP[T]) unusedError() error {
	names := make([]string, len(d.unused))
	for k, i := range d.unused {
		names[k] = fmt.Sprintf("%s (index %d)", d.params[i].Name(), i)
	}
	return fmt.Errorf("rank %d: %w: %s; "+
		"pass ddp.WithFindUnusedParameters() (PyTorch's find_unused_parameters=True) to reduce them with a zero gradient, "+
		"and make sure the forward pass uses Tapped()[i], not the parameter itself",
		d.group.Rank(), ErrUnusedParameters, strings.Join(names, ", "))
}
