// Package sim is a simulated transport: N virtual ranks in one process,
// each with a virtual clock, so that the library's unchanged algorithm
// code runs on thousands of ranks and reports modelled times instead of
// measured ones.
//
// # Vocabulary
//
//   - rank, message, header, sink: as in package transport.
//   - node: ranks r with the same r / Config.LocalSize (consecutive blocks
//     of LocalSize ranks, the last block smaller when LocalSize does not
//     divide N; LocalSize 0 or >= N puts every rank on one node). A Conn
//     names its node "node<k>" (NodeName), so topology-aware algorithms
//     (hierarchical, torus, mesh) find it.
//   - link: the cost of a message, Link{Alpha, Beta}: Config.Intra between
//     two ranks of one node (a rank and itself included), Config.Inter
//     between nodes.
//   - clock t_r: rank r's virtual time in seconds (float64), from 0.
//   - reduce: a receive whose sink is not a transport.Placer (a Placer is a
//     plain copy; any other sink combines the bytes with local data).
//
// # Link model
//
// For a message from rank s to rank d of n bytes, let f be the product of
// Config.SlowFactor if s or d is Config.SlowRank (once, also for s == d)
// and the Factor of every Config.SlowLinks entry for s → d (1 if none),
// and α = Link.Alpha·f, β = Link.Beta·f for the link's class. With γ =
// Config.Gamma:
//
//	Send(to, n bytes) at clock t on rank s (Config.Ports 0, the default):
//	    start       = max(t, egressFree_s)      // one message at a time leaves s
//	    egressFree_s = start + n·β
//	    arrival     = start + α + n·β           // carried by the message
//	    t_s         = start + n·β               // eager: s does not wait for d
//
//	Send with Config.Ports = k ≥ 1 (k egress ports; sends overlap):
//	    p           = the port of s free first (the lowest on a tie)
//	    start       = max(t, portFree_s[p], linkFree_{s→d})
//	    portFree_s[p] = linkFree_{s→d} = start + n·β
//	    arrival     = start + α + n·β
//	    t_s         = start                     // the port carries it; s goes on
//
//	Recv(from, n, sink) at clock t on rank d:
//	    t_d = max(t, arrival) + (reduce ? n·γ : 0)
//
//	Exchange(to, sp, from, n, sink) at clock t:
//	    sendDone = the Send rule's t_s, from t
//	    recvDone = max(t, arrival) + (reduce ? n·γ : 0)   // the Recv rule, from t
//	    t        = max(sendDone, recvDone)
//
// A Send is a lone send (its sender receives nothing in that step): with
// Config.LoneAlpha set its α is Link.Alpha·f·LoneAlpha; an Exchange's
// message keeps α.
//
// n·β is the link's transfer time in the regime n falls in: n·SmallBeta
// when SmallBytes > 0 and n ≤ SmallBytes, else n·CacheBeta when
// CacheBytes > 0 and n ≤ CacheBytes, else n·Beta (each times f).
//
// (Floating point: arrival is computed as (start + α) + n·β.) Receivers are
// not serialised: a rank's ingress is unlimited and full duplex with its
// egress. Advance(d) adds d seconds of modelled local work to a clock;
// AlignClocks is a barrier of zero virtual cost that sets every clock to
// the latest one. With Ports 0, since a Send leaves the sender's clock at
// its egressFree and clocks never go back, egressFree never exceeds the
// clock: a rank's consecutive sends are serialised (the second starts when
// the first has left) through its clock, and a receive that follows a send
// waits for it. With Ports k ≥ 1, a rank's sends to distinct peers travel
// at once, up to k of them, while the rank receives and reduces: a NIC
// that sends by DMA (k = 1), or a connection per peer with a writer of its
// own and a socket buffer to write into (k = N−1, loopback tcp). Messages
// on one link (an ordered pair of ranks) still go one at a time.
//
// Shared NICs (Config.NICs = k ≥ 1): a message between nodes is first
// ready at the start the rules above give it, then waits for the NIC its
// sender shares with the other ranks of its node (local rank i uses NIC
// i mod k), which carries one message at a time:
//
//	start      = max(ready, nicFree)            // messages in order of ready time, then rank
//	nicFree    = start + n·β
//	arrival    = start + α + n·β
//	t_s        = start + n·β (Ports 0), or ready (Ports ≥ 1: a port took it)
//
// The NIC serves messages in virtual-time order, not in the order the
// goroutines reach it (nic.go says how), so times stay deterministic; a
// rank waiting for its NIC counts as blocked.
//
// Two endpoints per rank (Config.Overlap), as package mixed has (shared
// memory within a host, tcp between): World.Endpoints says which ranks a
// rank's local endpoint carries, and package allreduce then runs a
// topology composition's blocks on two goroutines of the rank, the
// intra-node stages on one and the inter-node stage on the other
// (pipeline.go). While it does (SplitClock to JoinClock) the rank has a
// clock per endpoint, t_r^local and t_r^other: the rules above apply to
// each with its own egress (and ports), a call going by the clock of its
// peer's side, and where one goroutine waits for the other the waited-for
// one posts its clock and the waiting one takes it:
//
//	PostClock(e):  append t_r^e to the other endpoint's marks
//	AwaitClock(e): wait for the next mark m of endpoint e; t_r^e = max(t_r^e, m)
//	JoinClock:     t_r = max(t_r^local, t_r^other)
//
// So two stages on different links overlap, and the stages on one link
// follow one another (endpoints.go).
//
// Shared cores (Config.Cores = C ≥ 1): each rank counts its work, n·β of
// every message it sends (β the link's large-message rate, times f,
// whatever the message's regime; times Config.ExchangeWork when an
// Exchange sends to the rank it receives from) and n·γ of every
// reduction; AlignClocks
// sets the clocks to no earlier than
//
//	previous alignment + max over nodes (Σ its ranks' work since) / C
//
// the allreduce package's cores bound (cost.Work): a node whose ranks
// share C cores cannot have done more work than C cores do. It applies at
// the alignments only, so a collective is timed between two.
//
// Example: one Send of n bytes from s to d, both at clock 0, then d's
// Recv into a Placer: t_s = n·β, t_d = α + n·β; into a reducing sink,
// t_d = α + n·β + n·γ. Two back-to-back Sends of n bytes leave at 0 and
// n·β and arrive at α + n·β and α + 2n·β. With Ports 2 and the second Send
// to another rank, both leave at 0, arrive at α + n·β, and t_s = 0.
//
// # Determinism
//
// A rank's clock is a function of its own program order (the calls it
// makes, each naming its peer) and of the timestamps carried by the
// messages it receives; messages between an ordered pair are delivered in
// send order, and a receive names its source. So the virtual times are the
// same whatever the goroutine scheduling: the ranks run as ordinary
// concurrent goroutines, with no global scheduler, and two runs of one
// program give bitwise identical clocks. Shared NICs (Config.NICs) keep
// it by serving their messages in virtual-time order: a request waits
// until no rank of its NIC can ask for an earlier slot, or until every
// rank is blocked (nic.go). This holds as long as each rank
// issues its calls in a deterministic order from one goroutine at a time
// (package allreduce does, using Exchange), or, between SplitClock and
// JoinClock, from one goroutine per endpoint, which hand their times over
// by PostClock and AwaitClock (the marks are taken in the order posted).
//
// # Timing-only mode
//
// With Config.TimingOnly, payload bytes are accounted but not moved where
// they lie in the world's virtual arena: World.Buffer(n) (and
// Conn.VirtualBytes) return n bytes of one region shared by every rank and
// every call, which the transport never reads or writes. On linux it is an
// anonymous PROT_NONE, MAP_NORESERVE mapping (PROT_NONE on the BSDs and
// darwin), so it costs no memory and any accidental access faults; it
// grows by a new mapping when a larger n is asked for and is unmapped by
// World.Close. Elsewhere it is ordinary memory the transport does not
// touch. So 1024 ranks can run an all-reduce of 256 MiB each.
//
// A Send of a payload that lies in the arena (Conn.Virtual) copies
// nothing: only its length travels. Its Recv calls the sink not at all
// (neither Consume nor Place), even if the receiver's destination is real
// memory (which then keeps its old bytes), but charges exactly the time a
// real message would, γ included when the sink is not a Placer. Payloads
// outside the arena are always copied and delivered, in either mode (small
// control messages, like a topology exchange, use real memory); a real
// payload received into a Placer whose destination lies in the arena is
// not written. Timing-only mode therefore gives the same virtual times as
// real-payload mode for the same program.
//
// In real-payload mode everything is copied: Send copies the payload (the
// caller may reuse it at once) into a pooled buffer that the receive hands
// to the sink, in one piece (Consume, or Place and a copy), and returns to
// the pool.
//
// # The rest of the contract
//
// Header and length are checked on receipt: a difference is a
// *transport.MismatchError to the receiver, and to the sender from its
// blocked receive or next call. Close, Abort (which, as in package inproc,
// fails every rank's blocked call with the aborting rank's cause), the
// context and a real-time timeout (Config.Timeout) unblock pending calls.
// When every rank that is not closed is blocked in a receive or
// AlignClocks and nothing pending can satisfy any of them, every blocked
// call fails at once with a *DeadlockError (wrapping transport.ErrTimeout)
// that names each blocked rank and the rank and header it waits for. This
// detection assumes, as determinism does, that a rank does not have a
// second goroutine about to send while its receive blocks, except the
// other endpoint's between SplitClock and JoinClock, whose waits
// (AwaitClock included) count apart.
//
// # Not modelled
//
//   - Contention beyond the shared NICs' egress: links do not share
//     switches, ingress is unlimited (a node receives any number of
//     messages at once), and ranks of a node do not share its cores or
//     memory bandwidth.
//   - Local copies and reductions the algorithm does itself outside a
//     receive (only a receive's reduction is charged, by γ), memory
//     bandwidth, and CPU time (add it with Advance).
//   - Eager-send limits: a Send never blocks, whatever the receiver does.
package sim
