// Package allreduce is ringddp's communicator: a Group of ranks over a
// transport.Conn and the collectives on it — AllReduce, ReduceScatter,
// AllGather, Broadcast, Reduce, Barrier and Shift — with the reduction operators
// Sum, Avg, Max, Min and Prod over float32, float64, int32 and int64, and
// the 16-bit floats numeric.Float16 and numeric.BFloat16 (each combine step
// in float32, rounded once; combine16.go).
//
// Vocabulary:
//   - rank: a participant, numbered 0..N-1 where N is the group size.
//   - chunk: one of N contiguous, nearly equal parts of a buffer of count
//     elements; rank i owns chunk i (see ChunkBounds). Chunk sizes differ by
//     at most one element.
//   - step: one round of a collective in which every rank sends at most one
//     message and receives at most one.
//   - segment: a piece of a message that a transport moves and reduces on
//     its own so that reducing one piece overlaps moving the next (done by
//     the transport through transport.Sink).
//   - sequence number: every collective on a Group takes the next number on
//     the calling goroutine; collectives run in that order, and every message
//     carries it with the kind, dtype, count, op and root, so ranks that issue
//     different collectives get an error naming both calls instead of a hang.
//   - final part: a part of a collective's buffer that the call will not
//     write again; AllReduceRanges and AllGatherVRanges report them as they
//     come (rangedone.go), so that a caller can work on them while the rest
//     of the call runs.
//
// Algorithms and bytes on the wire, for a buffer of M bytes on N ranks (S
// pipeline segments; P the largest power of two ≤ N, R = N-P; L ranks per
// node and K nodes for the topology algorithms):
//
//	collective     algorithm                                steps              bytes sent per rank
//	AllReduce      ring: reduce-scatter then all-gather      2(N-1)             2(N-1)/N·M
//	AllReduce      direct two-shot (shared memory only)      3 barriers         2(N-1)/N·M read from peers
//	AllReduce      direct one-shot (≤ 32 KiB, shared)        2 barriers         (N-1)·M read from peers
//	AllReduce      doubling: recursive doubling              ⌈log2 N⌉(+2)       ⌈log2 N⌉·M
//	AllReduce      tree: double binary tree, pipelined       1+8(S+⌈log2 N⌉) rounds  ≤ 2M
//	AllReduce      hd: halving-doubling (Rabenseifner)       2·log2 P (+2)      2(P-1)/P·M (+M below 2R)
//	AllReduce      hierarchical: reduce, ring, broadcast     1+reduce(L)+2(K-1)+bcast(L)  2(K-1)/K·M between nodes (local roots)
//	AllReduce      torus: RS in node, L rings, AG in node    1+(L-1)+2(K-1)+(L-1)  2(N-1)/N·M, 2(K-1)/K·M/L between nodes
//	AllReduce      mesh: AR in node, AR between nodes        1+2(L-1)+2(K-1)    2(L-1)/L·M within + 2(K-1)/K·M between
//	ReduceScatter  ring                                      N-1                (N-1)/N·M
//	ReduceScatter  hd: agreement + recursive halving         1+log2 P (+2)      (P-1)/P·M (+M below 2R)
//	AllGather      ring                                      N-1                (N-1)/N·M (M = gathered size)
//	AllGather      hd: agreement + recursive doubling        1+log2 P (+2)      (P-1)/P·M (+M below 2R)
//	Broadcast      agreement + binomial tree (small; N ≤ 2)  1+⌈log2 N⌉         ≤ ⌈log2 N⌉·M (root)
//	Broadcast      agreement + pipelined chain (large)       1+S+N-2            M (every rank but the last)
//	Reduce         agreement + binomial tree (small; N ≤ 2)  1+⌈log2 N⌉         M (each non-root, once)
//	Reduce         agreement + pipelined chain (large)       1+S+N-2            M (each non-root)
//	Barrier        dissemination                             ⌈log2 N⌉           0
//	Shift by d     one exchange: to r+d, from r−d (shift.go)  1                  its own buffer
//	(any, 0 elements; ReduceScatter/AllGather on 1 rank) agreement   1          0
//
// The topology algorithms run their phases as collectives on sub-groups
// (hierarchy.go); the step counts above assume the ring inside them. On
// uneven nodes a rank of a smaller node holds several of the L slots and
// repeats its inter-node work once per slot.
//
// The agreement step is one exchange of a 0-byte message carrying the
// call's header with both ring neighbours. It runs where the collective's
// own messages might not cross between ranks that called different things
// (a tree's leaves only receive; a call with no elements sends nothing),
// so a mismatch is still found there instead of hanging. Shift has none
// (its point is one message and no round trip): ranks that disagree on
// it (another offset, another call) wait for messages that never come, as
// with MPI_Sendrecv, and fail at the transport's timeout or their
// context's deadline, the hang blame naming each rank's call.
//
// Every collective's algorithms are rows of one schedule table keyed by
// (collective, algorithm) (schedules.go): each row's schedule, what it
// needs of the group, and its cost formula. A group runs the row it asks
// for (WithAlgorithm, WithRootedSchedule, WithSchedule) or Auto's pick
// (selector.go), the same way for every collective; where the binomial
// tree gives way to the chain is the model's pick, not a fixed size.
// Auto takes the argmin of the cost model (package cost): each algorithm's file gives
// its predicted time as a formula of the link model (α per message, β per
// byte, within and between nodes; γ per reduced byte), the group's shape
// and the bytes, and, where a node's ranks share fewer cores than they
// need (Model.Cores), at least its busiest node's work over those cores
// (cost.Work); Auto evaluates them once per power-of-two size class and
// caches the pick, among the algorithms whose requirements the group
// meets. The model is cost.DefaultModel's (a measured in-process or loopback
// tcp profile) unless WithModel gives a calibrated one (cmd/bench
// -calibrate writes it; RINGDDP_PROFILE names it to the commands).
// Broadcast and Reduce choose between the binomial tree and the pipelined
// chain the same way; ReduceScatter and AllGather run the ring unless
// WithSchedule asks for halving-doubling (Auto does not pick it).
//
// Exactness: every rank ends bitwise identical, whatever the values (±0,
// NaN payloads, ±Inf, denormals), and the same run to run. For floats
// a op b and b op a can differ (Max of +0 and -0, the payload of NaN + NaN),
// so no algorithm lets two ranks compute one value with the operands in
// different orders: the ring and the two-shot direct algorithm reduce each
// chunk once, on its owner, in a fixed order and copy the result; one-shot
// direct reduces in rank order on every rank; recursive doubling takes the
// lower rank's operand first at every step. Avg is Sum followed by one
// division by N of each element, done once by the rank that owns it.
//
// Failures: the first error of any collective poisons the Group. Every later
// call fails at once with the original cause, and the transport is told to
// abort, so peers blocked on this rank fail at once too instead of waiting
// for their timeout.
//
// Mismatches: ranks that issue different collectives (kind, count, dtype,
// op or root) each get an error naming both calls and the ranks that made
// them — from the mismatched call itself or, for a rank whose part of it
// was already complete (a broadcast leaf that got its data, say), from its
// next call on the Group (ErrGroupFailed wrapping the cause). The error
// wraps a *transport.MismatchError whose Rank and Peer are the two ranks;
// a rank that learns of a mismatch between two others reports it as
// theirs, with the rank that found it and the ranks that relayed it.
package allreduce
