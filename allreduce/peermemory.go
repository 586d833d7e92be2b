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

// lending is what conn's PeerMemory offers the cost model
// (Shape.PeerMemory, Shape.LendLimit): none, in place (limit 0) or copies
// of at most limit bytes.
func lending(conn transport.Conn) (peerMemory bool, limit int) {
	_, most, ok := PeerMemoryOf(conn)
	if !ok {
		return false, 0
	}
	if most == math.MaxInt {
		return true, 0
	}
	return true, most
}
