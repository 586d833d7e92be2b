// Package graphlock serialises gorgonia graph construction across the process.
// It is public because every program that builds several ranks' graphs in
// one process (in-process ranks) needs it, ringddp's packages and user code alike.
//
// gorgonia v0.9.18 is not safe for building several expression graphs at the
// same time, even when the graphs are disjoint. Measured with -race:
//   - Rectify, Conv2d, MaxPool2D (and AvgPool2D) call internal/encoding.NewGroup,
//     which increments an unguarded package-level counter (groupIndex) on
//     every call;
//   - G.Grad adds the package-level constant node onef32/onef64 to the graph
//     (gorgonia.go:241 → ExprGraph.AddNode), which computes and caches that
//     shared node's hash lazily (Node.Hashcode writes n.hash, n.hashed); Rectify
//     splices the package-level zero constants in by the same path.
//
// Running already-built machines (TapeMachine.RunAll) in parallel is safe.
//
// The mutex in this package is the one justified piece of package-level state
// in the module: it protects state that is itself package-level (inside
// gorgonia), so it must be process-wide too.
//
// Rules for callers:
//   - Every piece of code that adds nodes to a gorgonia graph runs inside Do:
//     the models package does so itself in its constructors, Forward methods
//     and CrossEntropy; ddp, zero and the trainers wrap their own graph
//     building (tap ops, G.Grad / G.Backpropagate, G.NewMatrix for inputs,
//     G.NewTapeMachine) in Do.
//   - Do is not reentrant. Never call a function that takes the lock (model
//     constructors, Model.Forward, models.CrossEntropy) from inside Do: build
//     the forward first, then take the lock for G.Grad.
//   - Keep the critical section to graph construction; never run a machine
//     (RunAll) or communicate while holding the lock.
package graphlock

import "sync"

// mu is the process-wide graph-construction lock (see the package comment for
// why it is package-level).
var mu sync.Mutex

// Do runs fn while holding the process-wide graph-construction lock and
// returns fn's error. A panic in fn releases the lock and propagates.
// Do is not reentrant: fn must not call Do, directly or indirectly.
func Do(fn func() error) error {
	mu.Lock()
	defer mu.Unlock()
	return fn()
}
