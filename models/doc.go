// Package models holds the reference gorgonia models (MLP, LeNet) and the
// loss and evaluation helpers they are trained with.
//
// A model owns its trainable parameter nodes and builds its forward pass from
// parameter nodes that the caller passes in. This lets a wrapper (ddp)
// substitute each parameter with a node of its own — a "tap" applied before
// the parameter's first use — and rebind parameter values (G.Let) to views
// into a flat arena, without the model knowing. models imports nothing of
// ddp, zero, allreduce or optim.
//
// Graph construction in gorgonia is not safe to run concurrently, so every
// function here that adds nodes to a graph (the constructors, Forward,
// CrossEntropy) takes graphlock itself. graphlock.Do is not
// reentrant: do not call these functions from inside graphlock.Do.
//
// Parameter initialisation is seeded and deterministic (gorgonia's own
// initialisers are clock-seeded): the same seed gives bitwise-identical
// parameters on every rank and every run.
package models

import (
	G "gorgonia.org/gorgonia"
)

// Model is a gorgonia model: trainable parameters plus a forward that builds
// logits from them.
type Model interface {
	// Learnables returns the trainable parameter nodes in creation order.
	// The slice is fresh; the nodes are the model's own input nodes, whose
	// values may be rebound with G.Let (same shape and dtype).
	Learnables() G.Nodes
	// Forward builds the logits node (batch × classes) for input x using
	// params, which must have the same length, order, shapes and dtype as
	// Learnables and live in x's graph; the caller may pass substitutes for
	// the learnables (for example identity ops applied to them).
	Forward(x *G.Node, params G.Nodes) (*G.Node, error)
}
