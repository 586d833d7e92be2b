// Package tcp is the transport for ranks in separate processes or on
// separate hosts: a full mesh of TCP connections, one per pair of ranks.
//
// Setup (Dial): each rank listens (Config.ListenAddr, default loopback),
// publishes "host:port" in a rendezvous.Store under
// "ringddp/tcp/<RunID>/addr/<rank>", dials every lower rank and accepts
// every higher one. Each connection starts with a handshake (protocol
// version 4, handshake.go) carrying the protocol magic and version, the
// world size, both ranks, the wire protection (configured, and as each
// end resolved it for the link) and the run id, and an
// HMAC-SHA256 challenge-response over the job's secret in both directions,
// fresh nonces from both sides in both MACs. The dialing rank proves the
// secret first: a listening rank sends nothing computed with the secret to
// a peer that has not proved it, so a stranger who connects gets nothing
// to test guesses against offline; and secrets must pass
// rendezvous.CheckSecret (at least 16 bytes, not all digits, at least 8
// distinct byte values). A wrong secret, world size, run id, wire
// protection or protocol version (both versions named), a link whose two
// ends resolved auto differently (both views named), or a duplicate
// rank, is refused with a clear error on both sides; a refusal sent before
// the peer proved the secret names no rank. Both ends then derive
// the link's session key, HMAC-SHA256 over the secret, both nonces, both
// ranks and the run id, which keys the wire protection (all zeros when
// Insecure). Running without a secret is an explicit opt-out
// (Config.Insecure).
//
// Strangers cannot keep ranks out: a listening rank holds at most 64
// connections that have not yet sent a well-formed hello and 64 that owe
// the proof; a full stage drops, for a newcomer (never the newcomer), the
// oldest connection of the host holding the most in it (pending.go), so a
// flood from one address evicts only its own connections; and it closes
// any connection not authenticated within Config.HandshakeTimeout
// (default 2 s). A dialing rank whose connection was dropped dials again
// at once. Under a stranger's connection flood the mesh forms within tens
// of milliseconds of the last rank's arrival (flood_test.go).
//
// While the mesh forms, Dial prints through Config.Log (default stderr)
// each connection it turns away, from where and why, as it happens (the
// first of each cause and source; repeats are summed up later), and every
// 15 s whom it still waits for and what dialing them gave (away.go,
// mpconn.Reporter). If it does not form by Config.ConnectTimeout, the
// error names the missing ranks and counts the connections turned away,
// by reason and by host, with the latest few and the first refusals'
// reasons.
//
// Messages (wire.go): a 56-byte header — magic, type, the transport.Header
// fields, payload length, CRC-32C — then the payload; under wire
// protection, header and payload travel as tagged records (below). The receiver checks
// the header and length against what it expects before it reads a byte of
// payload; on a mismatch it fails with a *transport.MismatchError and sends
// the sender a nack frame, so the sender fails with the mirror-image
// error. Payloads are bounded (Config.MaxMessage) and read into the
// receiver's own fixed buffers, never into memory sized by the sender.
//
// Each connection has a reader goroutine, which parses every frame the
// peer sends and hands payloads to the receiving call in 256 KiB pieces
// through two buffers (the sink reduces one piece while the next is read
// from the socket), and a writer goroutine for data frames, so that a ring
// step (Exchange) sends to the right and receives from the left at once.
// In steady state a message allocates nothing.
//
// Receiving into a transport.Placer's destination (an all-gather's or a
// broadcast's), the reader reads the socket straight into it, saving a
// copy; a receive that gives up revokes the destination first (link.revoke),
// so nothing is written there after it returns.
//
// Small messages: a reader parked in the runtime's network poller is woken
// through epoll and the schedulers, which with several ranks per core costs
// more than the message. While a receive of at most 1 MiB waits, its
// link's reader instead polls the socket with non-blocking reads, yielding
// the processor to the Go scheduler and to the operating system between
// polls (as OpenMPI does when oversubscribed), for at most Config.Spin
// (default 2 ms; negative disables). A receive that starts while the reader
// is parked kicks it out of the poller by moving its read deadline (poll.go).
// Linux only; elsewhere readers always park.
//
// Writes: payloads up to 4 KiB are written on the caller's goroutine, larger
// ones by the link's writer goroutine in 4 MiB chunks.
//
// A rank may message itself (a ring of one does): such messages never
// touch the network; the sink reads the sender's buffer.
//
// Failures: a peer that dies (reset, EOF) fails every pending and later
// call involving it with a *transport.PeerError naming it; Abort sends an
// abort frame with the cause to every peer (they get a PeerError wrapping
// an *AbortError); Close sends a goodbye frame (peers get a PeerError) and
// fails pending calls with transport.ErrClosed. Peers acknowledge an abort
// or goodbye by closing their side, and Abort and Close wait up to a
// second for that, so that when they return the peers know. A call that
// sees no progress for Config.Timeout (default 30 s) fails with a
// *transport.TimeoutError. A link that failed stays failed; package
// allreduce poisons the group and aborts on the first error anyway.
//
// Wire protection (Config.WireProtection, wireprotect.go), keyed from the
// link's session key: with WireMAC every frame, header and payload, is
// authenticated, so a byte changed, dropped, replayed, reordered or spliced
// on the way fails the link with an error wrapping ErrWireAuth that names
// it (its abort tells the peer); WireAEAD also encrypts. The frame is then
// a sequence of records, one for the header and one per started 256 KiB of
// payload, each with a 16-byte AES-256-GCM tag under a key per direction
// and a record counter as nonce (wire.go). The receiver checks each record
// before it hands any of it to the receiving call, in the same 256 KiB
// pieces, so verification streams in bounded memory. The default is
// WireAuto: mac on every link between hosts, none on links within one
// (their bytes never leave the kernel, and there mac costs most, as the CPU
// moves every byte: see DefaultWireProtection); there the handshake alone
// authenticates. Each end resolves auto from its own socket's addresses
// and the handshake binds both choices, so the two ends of a link always
// use the same mode. WireMAC everywhere and WireAEAD are a setting away.
package tcp
