// Package cost is the cost model of the collectives: the link model, a
// machine's Model, the Shape of a group, the primitives the schedules'
// formulas are written with, the cores bound, the formulas of the rooted
// schedules (the binomial tree and the chain) and the calibrated
// Profiles that `cmd/bench -calibrate` writes.
//
// Package allreduce prices each of its schedules with a formula written
// next to the schedule out of these primitives and picks the cheapest
// (Auto); package sim runs the same schedules under the same link model
// (its Config carries a Model), so formula and schedule are checked
// against each other. This package imports neither: it is a leaf.
//
// The link model, per message of b bytes over a link l = (α, β):
//
//	a send occupies the sender for b·β seconds from its start (one
//	message at a time; with Model.Ports ≥ 1 it occupies one of the
//	sender's ports instead, and the sender goes on), and the message
//	arrives at start + α + b·β (β of the regime b falls in: Link);
//	a receive ends at max(its start, the arrival), plus b·γ when it
//	reduces the payload into a buffer (a plain copy costs nothing more);
//	an exchange (send to one rank while receiving from another) ends when
//	both halves have.
//
// So one ring step moving c bytes costs α + c·β (+ c·γ when it reduces),
// and a chain of steps adds up. Links within a node (Model.Intra) and
// between nodes (Model.Inter) have their own α and β; an algorithm that
// ignores the topology pays the slower link on every step once the group
// spans several nodes.
package cost
