package allreduce

import (
	"context"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Pieces. Over some transports a large message moves slower per byte
// than a smaller one: on loopback tcp a 2 MiB message is copied into the
// socket buffers whole and has left the caches by the time the peer reads
// and reduces it, while in pieces of 256 KiB sent in lock step each piece
// is read while it is still cached, which makes large exchanges markedly
// faster (docs/measurements.md has the figures). The cost model's Segment
// (Model.Segment; 0: never) is that size, and every message of every
// algorithm honours it, whichever primitive sends or receives it (a
// message one rank sends alone may be received inside the other's
// exchange):
//
//   - a message of b bytes in E elements goes as k = ⌈b/Segment⌉ pieces
//     (at most E), piece j being elements [j·E/k, (j+1)·E/k) (the last
//     ending at b), each carrying the message's step number: the pieces
//     of one message follow each other on their link, in order;
//   - send sends its pieces back to back, recvCopy and recvReduce take
//     them one by one;
//   - an exchange (sendRecvCopy, sendRecvReduce) cuts its send and its
//     receive each by its own size and runs them as k' = max(k_send,
//     k_recv) lock-step exchanges, the j-th sending piece j (while
//     j < k_send) and receiving piece j (while j < k_recv).
//
// Bytes on the wire are those of the whole messages; messages, k per
// message instead of one. The formulas count an exchange of x bytes as k
// exchanges of x/k (Model.pieces), and a message alone as its pieces back
// to back (Model.oneWay).

// exchangePieces runs the exchange of p (to rank to) against n bytes
// (from rank from) of the message h as lock-step pieces: recv(sp, send,
// lo, hi) receives bytes [lo, hi) of the n while sending sp when send is
// set (exchangePiece); a piece that only sends is sent here.
func (g *Group) exchangePieces(ctx context.Context, h transport.Header, to int, p []byte, from, n int,
	recv func(sp []byte, send bool, lo, hi int) error) error {
	es := elemSize(h)
	ks, kr := g.piecesOf(len(p), es), g.piecesOf(n, es)
	if ks == 1 && kr == 1 {
		return recv(p, true, 0, n)
	}
	for j := range max(ks, kr) {
		var sp []byte
		if j < ks {
			lo, hi := pieceBounds(len(p), es, ks, j)
			sp = p[lo:hi]
		}
		var err error
		if j < kr {
			lo, hi := pieceBounds(n, es, kr, j)
			err = recv(sp, j < ks, lo, hi)
		} else {
			err = g.conn.Send(ctx, to, h, sp)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// exchangePiece sends sp to rank to (when send is set; a piece beyond the
// send's count only receives) while receiving n bytes from rank from into
// sink, both as message h.
func (g *Group) exchangePiece(ctx context.Context, h transport.Header, to int, sp []byte, send bool, from, n int, sink transport.Sink) error {
	if !send {
		return g.conn.Recv(ctx, from, h, n, sink)
	}
	return g.exchange(ctx, to, h, sp, from, h, n, sink)
}

// recvPieces receives the n bytes of message h from rank from in the
// pieces its sender cut it into (piecesOf), sinkFor(lo, hi) readying the
// sink of bytes [lo, hi) for each; the group's sinks let go of the
// buffers after.
func (g *Group) recvPieces(ctx context.Context, h transport.Header, from, n int, sinkFor func(lo, hi int) transport.Sink) error {
	defer g.releaseSinks()
	es := elemSize(h)
	k := g.piecesOf(n, es)
	for j := range k {
		lo, hi := pieceBounds(n, es, k, j)
		if err := g.conn.Recv(ctx, from, h, hi-lo, sinkFor(lo, hi)); err != nil {
			return err
		}
	}
	return nil
}

// releaseSinks drops the group's sinks' references to the caller's
// buffers.
func (g *Group) releaseSinks() {
	g.copy.dst = nil
	g.combine.out, g.combine.local = nil, nil
}

// elemSize is the element size of message h's payload (1 for a message
// without a data type, as the agreement step's).
func elemSize(h transport.Header) int { return max(DType(h.DType).Size(), 1) }

// piecesOf is how many pieces a message of b bytes in elements of es
// bytes goes in: ⌈b/Segment⌉, at least 1 and at most its elements.
func (g *Group) piecesOf(b, es int) int {
	seg := g.model.Segment
	if seg <= 0 || b <= seg {
		return 1
	}
	return max(1, min((b+seg-1)/seg, b/es))
}

// pieceBounds is the byte range of piece j of k of a message of b bytes
// in elements of es bytes (the last piece ends at b).
func pieceBounds(b, es, k, j int) (lo, hi int) {
	if j == k-1 {
		return (j * (b / es) / k) * es, b
	}
	e := b / es
	return j * e / k * es, (j + 1) * e / k * es
}
