// Package shm is the transport for ranks that are processes on one host:
// messages travel through shared memory instead of loopback TCP.
//
// Vocabulary:
//   - file: one rank's anonymous memfd, holding the rings into that rank,
//     its doorbell and its status block (layout.go). Sealed against
//     shrinking and growing, allocated up front; no name anywhere.
//   - ring: per directed link, a single-producer single-consumer ring of
//     Config.Slots slots of Config.SlotSize payload bytes, with head (slots
//     published) and tail (slots consumed) counters.
//   - slot: a 128-byte header (slot.go: sequence number, the message's
//     transport.Header, length, piece offset and length, CRC-32C) and a
//     piece of one message's payload.
//   - doorbell: a rank's futex word; peers ring it when they publish to
//     the rank, free space in a ring out of it, or fail (futex_linux.go).
//   - status block: a rank's goodbye or abort cause; nack block: a
//     receiver's refusal of a mismatched message (status.go).
//
// Protocol (Dial, dial_linux.go): (1) create this rank's file; (2) listen
// on a random abstract Unix socket and publish its name in the store;
// (3) dial the lower ranks, accept the higher ones, and authenticate each
// connection with an HMAC-SHA256 challenge-response over the job's
// secret, the dialer proving it first (handshake.go); (4) only then pass
// the files' descriptors with SCM_RIGHTS, check and map the peer's;
// (5) close every descriptor but one socket per peer, which a watcher
// reads to learn the moment the peer's process is gone. While it waits,
// Dial prints through Config.Log (default stderr) each connection it turns
// away (the process at its other end, from SO_PEERCRED, and why) and every
// 15 s whom it still waits for (mpconn.Reporter).
//
// Messages: Send copies the payload into the ring slot by slot; Recv
// hands each slot's payload to the sink straight out of shared memory
// (the sink reduces from the peer's slot); Exchange does both on the
// caller's goroutine. Every slot header, ring counter and status read
// from shared memory is copied out and validated: anything malformed is an
// error wrapping ErrCorrupt, never a panic. Waiting spins for
// Config.Spin, then sleeps on the doorbell. A peer that closes, aborts or
// dies fails every call waiting on it with a *transport.PeerError naming
// it, at once; after what it published first has been delivered.
//
// Linux only; elsewhere Dial fails with ErrUnsupported. docs/shm.md has
// the design, the failure handling and the security model.
package shm
