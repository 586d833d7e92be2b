package sim

import (
	"math/bits"
	"sync"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// The pending messages of a link: a queue of pooled payload copies.

// message is one pending message: its header and length, its arrival
// time, and a pooled copy of its payload (nil when virtual or empty).
type message struct {
	h       transport.Header
	n       int
	arrival float64
	buf     *[]byte
	virtual bool
}

func (m *message) release() {
	if m.buf != nil {
		putBuf(m.buf)
		m.buf = nil
	}
}

// fifo is the queue of pending messages from one sender to one receiver.
type fifo struct {
	msgs []message
	head int
}

func (q *fifo) push(m message) { q.msgs = append(q.msgs, m) }

func (q *fifo) pop() (message, bool) {
	if q.head == len(q.msgs) {
		return message{}, false
	}
	m := q.msgs[q.head]
	q.msgs[q.head] = message{}
	q.head++
	if q.head == len(q.msgs) {
		q.msgs, q.head = q.msgs[:0], 0
	}
	return m, true
}

// drop releases every pending message.
func (q *fifo) drop() {
	for i := q.head; i < len(q.msgs); i++ {
		q.msgs[i].release()
	}
	q.msgs, q.head = nil, 0
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Payload copies come from pools by size class (powers of two).
var bufPools [64]sync.Pool

func sizeClass(n int) int { return bits.Len(uint(n - 1)) }

func getBuf(n int) *[]byte {
	k := sizeClass(n)
	if b, ok := bufPools[k].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<k)
	return &b
}

func putBuf(b *[]byte) {
	bufPools[sizeClass(cap(*b))].Put(b)
}
