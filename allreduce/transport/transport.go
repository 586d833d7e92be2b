// Package transport defines what a collective algorithm needs from the
// machinery that moves bytes between ranks, and nothing else: the
// database/sql/driver role. Implementations live in sibling packages
// (inproc, tcp, ...); the algorithms live in package allreduce.
//
// Vocabulary:
//   - rank: the index 0..Size()-1 of one participant.
//   - message: one Send matched by one Recv between an ordered pair of ranks.
//     Messages between a pair are delivered in the order they were sent.
//   - header: the description of the collective a message belongs to. The
//     receiver states the header it expects; a transport that sees another
//     header reports a *MismatchError instead of delivering the payload, so
//     ranks that call different collectives fail instead of hanging.
//   - sink: where a receiver wants the bytes. A transport hands the payload to
//     the sink in order, in one or more pieces, so an in-process transport can
//     let the algorithm reduce straight from the sender's buffer and a network
//     transport can reduce piece k while piece k+1 is still on the wire.
//
// A Conn is used by one collective at a time (package allreduce runs the
// collectives of a group in sequence order). Within it, one Send and one
// Recv may run at once (the fallback for transports without Exchange sends
// on a second goroutine); Close and the optional Abort may be called from
// any goroutine and must unblock every pending call.
package transport

import (
	"context"
	"fmt"
)

// Header identifies the collective a message belongs to. Every field is
// compared by the receiver; any difference is a mismatch.
type Header struct {
	Group uint32 // identifies the group when several share one transport
	Seq   uint64 // collective sequence number within the group, from 0
	Kind  uint8  // which collective (allreduce, broadcast, ...), defined by package allreduce
	DType uint8  // element type code, defined by package allreduce
	Op    uint8  // reduction operator code, defined by package allreduce
	Root  int32  // root rank for rooted collectives, else -1
	Count int64  // elements in the whole collective (not in this message)
	Step  uint32 // index of this message within the collective, per sender
}

func (h Header) String() string {
	return fmt.Sprintf("group=%d seq=%d kind=%d dtype=%d op=%d root=%d count=%d step=%d",
		h.Group, h.Seq, h.Kind, h.DType, h.Op, h.Root, h.Count, h.Step)
}

// Sink receives the payload of one message. Consume is called with
// consecutive pieces; off is the byte offset of p within the message and
// every piece but the last is a multiple of 8 bytes long. p is only valid
// during the call and must not be retained or modified.
type Sink interface {
	Consume(off int, p []byte)
}

// Placer is an optional capability of a Sink that copies every piece
// verbatim into one buffer: Place returns the n bytes where the message's
// payload goes, so that a transport may deposit it there itself (read a
// socket straight into it, say) instead of calling Consume, saving a
// copy. A transport that does so must not touch the buffer once the
// receive has returned, whether it succeeded or failed.
type Placer interface {
	Place(n int) []byte
}

// Conn is one rank's endpoint of a group of Size ranks.
type Conn interface {
	// Rank is this endpoint's rank.
	Rank() int
	// Size is the number of ranks.
	Size() int
	// Send delivers p to rank to under header h. It returns once p may be
	// reused by the caller. It fails with an error wrapping ErrPeer if the
	// peer is gone, ErrClosed if this Conn is closed, ErrTimeout if nothing
	// moved for the transport's timeout, or ctx.Err().
	Send(ctx context.Context, to int, h Header, p []byte) error
	// Recv receives the next message from rank from, which must carry header
	// h and exactly n bytes, and hands the bytes to sink. A different header
	// or length is a *MismatchError (also reported to the sender).
	Recv(ctx context.Context, from int, h Header, n int, sink Sink) error
	// Close releases the endpoint. Pending and later calls fail with ErrClosed;
	// peers see ErrPeer for this rank.
	Close() error
}

// Exchanger is an optional capability: send to one rank while receiving from
// another (both may be the same rank), as one ring step needs. Transports
// that lack it get a fallback that runs Send on a second goroutine.
type Exchanger interface {
	Exchange(ctx context.Context, to int, sh Header, sp []byte, from int, rh Header, n int, sink Sink) error
}

// Aborter is an optional capability: mark this rank as failed with cause and
// tell every peer, so that ranks blocked on this one fail at once with the
// cause instead of waiting for a timeout.
type Aborter interface {
	Abort(cause error)
}

// PeerMemory is an optional capability of transports whose ranks share one
// address space (in-process ranks). It lets an algorithm read every rank's
// buffer directly, with three synchronisation points instead of 2(N-1)
// message steps.
//
// An exposure is Expose, any number of Arrive, then Release, on every rank,
// all with the same header; between Expose and Release a rank may read
// peers' buffers and write its own only where the algorithm guarantees no
// peer reads concurrently.
type PeerMemory interface {
	// Expose lends p to every rank under header h, waits until every rank
	// has exposed a buffer and returns them by rank (the caller's own too).
	// The returned slice is owned by the transport and valid until Release.
	// A rank that exposes another header, or sends a message instead, gets
	// a *MismatchError, and so does the peer.
	Expose(ctx context.Context, h Header, p []byte) ([][]byte, error)
	// Arrive returns once every rank has arrived (a barrier).
	Arrive(ctx context.Context) error
	// Release ends the exposure once every rank has released it.
	Release(ctx context.Context) error
}
