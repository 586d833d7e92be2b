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
//     (StoreConfig.Insecure). After the handshake every request and reply
//     is authenticated (tcpstore_link.go): two GMAC tags per frame under a
//     key per connection and direction derived from the handshake, with a
//     counter per direction, so a relay without the secret cannot change,
//     replay, reorder or splice frames; the reader of a bad frame closes
//     the connection with an error wrapping ErrFrameAuth. Frames are not
//     encrypted. Insecure stores send them bare. Frames are bounded, every
//     blocking call has a timeout, and malformed input closes the offending
//     connection and nothing else.
//
// The server's limits (StoreConfig; defaults in parentheses) bound what
// strangers and secret holders can make rank 0 hold:
//   - Strangers: a connection has HandshakeTimeout (2 s) to authenticate,
//     and at most MaxPending (64) may be authenticating at once. A
//     connection arriving at that limit, or at MaxConns (1024), is served
//     and an authenticating connection is dropped instead: its own host's
//     oldest once that host holds as many as any other, else the oldest of
//     the host holding the most. So a flood of connections delays a rank
//     by milliseconds rather than shutting it out, and a flood from one
//     host evicts none of another host's handshakes. StoreServer.TurnedAway
//     counts what was dropped, and from where; a Get that times out tells
//     its caller too, as the likely reason a rank never arrived.
//   - Secret holders: a request's claimed length is checked against
//     MaxValueLen (1 MiB) and MaxInFlightBytes (16 MiB of request bodies
//     in flight over all connections) before anything is allocated for
//     it, and its body must arrive within IOTimeout (10 s); the store
//     holds at most MaxKeys (65536) keys and MaxStoredBytes (32 MiB); a
//     Get waits at most the server's Timeout, whatever the client asks,
//     and ends as soon as its client hangs up; replies a client leaves
//     unread fill at most MaxUnreadReplyBytes (128 KiB) of its
//     connection's send buffer before the server stops reading that
//     connection, and close it after IOTimeout. So rank 0's heap stays in
//     the tens of megabytes whatever a client sends. A refused request
//     fails with an error wrapping ErrLimit that names the limit.
//
// Connect puts the two together from an Env (FromEnv): rank 0 hosts the
// server, every rank gets a client.
//
// Counters made by Add are stored as decimal ASCII, so Get on a counter key
// returns e.g. "3" (as in PyTorch's TCPStore).
package rendezvous
