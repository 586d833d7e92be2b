// Package mpconn is what the multi-process transports, tcp and shm, share:
// the checks every Send, Recv and Exchange makes before it moves a byte
// and the self link it takes to its own rank (Core), the shape of Dial —
// connections tracked while the world forms, ranks admitted once, dials
// retried with backoff, links gathered until every peer has one (Setup,
// Redial, Gather) —, the defaults and checks of the configuration fields
// they have in common (CheckJob, DefaultLimits) and the error a peer's
// abort arrives as (AbortError).
//
// What differs between them stays with each: the wire or ring protocol,
// the handshake, how a link fails, the error texts of Dial.
package mpconn
