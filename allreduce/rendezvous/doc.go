// Package rendezvous is how the ranks of one job find each other: a small
// key-value Store (Set, blocking Get, atomic Add) and the environment
// conventions of the common launchers.
//
// Stores:
//   - MemStore: in memory, for ranks that are goroutines of one process and
//     for tests.
//   - TCP: rank 0 hosts a StoreServer at MASTER_ADDR:MASTER_PORT (the
//     torchrun convention) and every rank, rank 0 included, talks to it
//     through a TCPStore client. Every connection is authenticated in both
//     directions by an HMAC-SHA256 challenge-response over a shared secret
//     (RINGDDP_SECRET); running without one is an explicit opt-out
//     (StoreConfig.Insecure). Frames are bounded, every blocking call has a
//     timeout, and malformed input closes the offending connection and
//     nothing else. Authentication only: traffic after the handshake is
//     neither encrypted nor integrity-protected, as in gloo and NCCL, so run
//     jobs on a network you trust.
//
// Connect puts the two together from an Env (FromEnv): rank 0 hosts the
// server, every rank gets a client.
//
// Counters made by Add are stored as decimal ASCII, so Get on a counter key
// returns e.g. "3" (as in PyTorch's TCPStore).
package rendezvous
