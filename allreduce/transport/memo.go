package transport

import "sync"

// Memo holds values that every rank of a process works out the same way,
// each a pure function of its key: the first rank to ask for a key
// computes its value, the others wait for it and share it. A transport
// whose ranks share one process may give them all one Memo (a SharedMemo
// method, as package sim has), so that N ranks do not repeat one
// computation N times: the simulator's 1024 ranks choosing an algorithm
// by the cost model, say. The zero Memo is ready to use.
type Memo struct {
	mu sync.Mutex
	m  map[any]*memoEntry
}

type memoEntry struct {
	once sync.Once
	v    any
}

// Do returns key's value, computing it with compute if no rank has yet.
// key must be comparable; compute must not call Do on the same Memo.
func (m *Memo) Do(key any, compute func() any) any {
	m.mu.Lock()
	if m.m == nil {
		m.m = map[any]*memoEntry{}
	}
	e := m.m[key]
	if e == nil {
		e = &memoEntry{}
		m.m[key] = e
	}
	m.mu.Unlock()
	e.once.Do(func() { e.v = compute() })
	return e.v
}
