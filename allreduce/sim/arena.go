package sim

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// arena is a world's virtual memory: address ranges that the transport
// never reads or writes, handed out by World.Buffer in timing-only mode.
// On unix they are PROT_NONE mappings, so that any access faults. The
// ranges stay recorded after Close unmaps them, so that a slice handed out
// earlier is still recognised as virtual (and never copied).
type arena struct {
	mu     sync.Mutex
	maps   [][]byte // the live mappings, largest last
	closed bool
	spans  atomic.Pointer[[]span] // every range ever mapped; copy on write
}

type span struct{ lo, hi uintptr }

// minArena is the smallest mapping made: small buffers share one.
const minArena = 1 << 20

// buffer returns n bytes of the arena (nil if n < 0, after close, or if
// the mapping fails).
func (a *arena) buffer(n int) []byte {
	if n < 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	if k := len(a.maps); k > 0 && len(a.maps[k-1]) >= n {
		return a.maps[k-1][:n:n]
	}
	size := minArena
	for size < n {
		size *= 2
	}
	m, err := mapArena(size)
	if err != nil || len(m) < n {
		return nil
	}
	a.maps = append(a.maps, m)
	var spans []span
	if old := a.spans.Load(); old != nil {
		spans = append(spans, *old...)
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
	spans = append(spans, span{lo, lo + uintptr(len(m))})
	a.spans.Store(&spans)
	return m[:n:n]
}

// contains reports whether p starts inside the arena (len 0: false).
func (a *arena) contains(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	spans := a.spans.Load()
	if spans == nil {
		return false
	}
	at := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	for _, s := range *spans {
		if at >= s.lo && at < s.hi {
			return true
		}
	}
	return false
}

// close unmaps every mapping; later buffers are nil.
func (a *arena) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	var first error
	for _, m := range a.maps {
		if err := unmapArena(m); err != nil && first == nil {
			first = err
		}
	}
	a.maps = nil
	return first
}
