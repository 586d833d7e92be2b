// Package heal sends a replica's state to ranks that join a running
// data-parallel job (issue #34, item 3): the building block a trainer calls
// after the group has grown back at a step boundary.
//
// Vocabulary:
//   - joiner: a rank of the group that is a fresh process and holds no
//     state yet; sender: every other rank, each a replica holding the same
//     state (parameters, optimizer state, position, RNG state).
//   - state: what State holds — the parameter arena, the optimizer state
//     over the whole arena (DDP; none under ZeRO-1, whose shards are
//     re-sharded by package zero), the data order's position (epoch, step
//     of it, global step, the epoch's loss so far) and opaque RNG bytes.
//   - stream: the state's bytes in a fixed order: parameters, each
//     optimizer buffer (float64), RNG bytes, padded to 8-byte words. B is
//     its length. With State.ParamsHeld (ZeRO-1: the re-shard's all-gather
//     gave the joiners the parameters) the stream leaves the parameters
//     out; the replica check (step 4) still compares every rank's.
//   - stripe: the m senders, in rank order, cut the stream's words into m
//     contiguous stripes (allreduce.ChunkBounds); sender i sends stripe i.
//
// Heal's steps, every rank of the group calling it with the same joiners:
//
//  1. identity: one all-gather of a fixed-size descriptor per rank — its
//     role, the SHA-256 of its job id and run id (and their first 64 bytes,
//     to name them), its arena's length and element size, its optimizer's
//     kind, and for a sender the SHA-256 of its state's header. Every rank
//     judges the same descriptors the same way, so a joiner of another job
//     or run, of another model or optimizer, or senders whose states differ,
//     end Heal with the same error on every rank, naming the rank and what
//     differs, before any state moves.
//  2. header: the first sender broadcasts the header (position, optimizer
//     name, type, step, hyper-parameters and buffer names, lengths) as
//     JSON; joiners check it against the senders' digest and their own
//     shapes, bounds and ParamsHeld, and one all-gather of a status word says whether
//     every joiner can take the stream.
//  3. stripes: for each sender i, the group of that sender and the joiners
//     (made by Split) carries stripe i in segments of at most 8 MiB
//     (Broadcast from the sender), then its SHA-256. A joiner that finds a
//     digest that does not check keeps receiving (so no sender waits on it)
//     but loads nothing, and says so in step 4.
//  4. verdict and replica check: one all-gather of each rank's status, the
//     bytes it sent, and the SHA-256 of its parameters and of its optimizer
//     state. Any failure (a stripe's checksum, with its sender and stripe),
//     or parameters or optimizer states not bitwise equal on every rank, is
//     the same error on every rank; only then does a joiner's State hold
//     the state.
//
// Bytes: each sender sends about B/m bytes of stripes (one joiner; with
// several joiners the stripe's broadcast may relay through them), the
// first sender the header too, and every rank three small all-gathers and
// m Splits (each an all-gather of two words per rank). A rank that dies
// during Heal ends it on every other rank with the transport's error, within
// its timeout: every step is a collective, none waits without one.
package heal
