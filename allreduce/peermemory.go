package allreduce

import (
	"math"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// peerMemoryProvider is the optional capability of a transport wrapper
// (a launcher's endpoint over tcp or shm, say) that lends transport.
// PeerMemory only when what it wraps has it: PeerMemory returns it, or
// nil.
type peerMemoryProvider interface {
	PeerMemory() transport.PeerMemory
}

// exposureLimiter is the optional capability of a PeerMemory that lends
// at most MaxExposure bytes at a time (shm lends copies in its files):
// the direct algorithm then runs segment by segment.
type exposureLimiter interface {
	MaxExposure() int
}

// PeerMemoryOf returns conn's transport.PeerMemory, its own or through a
// wrapper's PeerMemory method, and the most bytes it lends at a time
// (math.MaxInt where unlimited); false when conn has none.
func PeerMemoryOf(conn transport.Conn) (pm transport.PeerMemory, maxBytes int, ok bool) {
	pm, ok = conn.(transport.PeerMemory)
	if !ok {
		if p, is := conn.(peerMemoryProvider); is {
			pm = p.PeerMemory()
			ok = pm != nil
		}
	}
	if !ok {
		return nil, 0, false
	}
	if l, is := pm.(exposureLimiter); is {
		return pm, l.MaxExposure(), true
	}
	return pm, math.MaxInt, true
}

// sharesMemory reports whether conn lends its buffers without a limit,
// as ranks in one address space do: what the cost model's
// Shape.PeerMemory means. A transport that lends copies of bounded size
// (shm) runs the direct algorithm when asked, but Auto does not consider
// it.
func sharesMemory(conn transport.Conn) bool {
	_, limit, ok := PeerMemoryOf(conn)
	return ok && limit == math.MaxInt
}
