package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Store is the key-value store the ranks of a job rendezvous through.
// Implementations are safe for concurrent use.
type Store interface {
	// Set stores a copy of value under key, replacing any earlier value,
	// and wakes every Get waiting for key.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns the value of key, waiting until some rank sets it, ctx
	// ends or the store's timeout passes (an error wrapping ErrTimeout).
	Get(ctx context.Context, key string) ([]byte, error)
	// Add adds delta to the counter at key (a missing key counts as 0) and
	// returns the new value, atomically. Counters are stored as decimal
	// ASCII; Add on a key holding anything else is an error.
	Add(ctx context.Context, key string, delta int64) (int64, error)
}

// Errors of the stores, for errors.Is.
var (
	// ErrTimeout: a Get found no value, or a call no answer, in time.
	ErrTimeout = errors.New("rendezvous: timed out")
	// ErrClosed: the store (client or server) was closed.
	ErrClosed = errors.New("rendezvous: store closed")
	// ErrAuth: the other end of a store connection failed authentication,
	// or refused ours.
	ErrAuth = errors.New("rendezvous: authentication failed")
	// ErrProtocol: the other end sent something that is not this protocol.
	ErrProtocol = errors.New("rendezvous: protocol error")
	// ErrInvalid: an impossible argument or configuration.
	ErrInvalid = errors.New("rendezvous: invalid argument")
	// ErrNotCounter: Add on a key whose value is not a decimal integer.
	ErrNotCounter = errors.New("rendezvous: value is not a counter")
)

// DefaultTimeout bounds a Get or any store call when the caller's context
// has no earlier deadline: long enough for the ranks of a job to start.
const DefaultTimeout = 5 * time.Minute

// Limits on what a store accepts.
const (
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 1024
	// DefaultMaxValueLen is the longest value a TCP store accepts unless
	// configured otherwise.
	DefaultMaxValueLen = 1 << 20
)

// MemStore is a Store in memory, for ranks in one process and tests.
// The zero value is not ready: use NewMemStore.
type MemStore struct {
	// Timeout bounds every Get whose context has no earlier deadline;
	// DefaultTimeout unless changed before use.
	Timeout time.Duration

	mu      sync.Mutex
	data    map[string][]byte
	changed chan struct{} // closed and replaced on every change
	closed  bool
	done    chan struct{} // closed by Close
}

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{
		Timeout: DefaultTimeout,
		data:    make(map[string][]byte),
		changed: make(chan struct{}),
		done:    make(chan struct{}),
	}
}

func checkKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes (want 1..%d)", ErrInvalid, len(key), MaxKeyLen)
	}
	return nil
}

// notify wakes every waiter; called with mu held.
func (m *MemStore) notify() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Set stores a copy of value under key.
func (m *MemStore) Set(ctx context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	v := append([]byte{}, value...)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.data[key] = v
	m.notify()
	return nil
}

// Get waits for key to be set and returns a copy of its value.
func (m *MemStore) Get(ctx context.Context, key string) ([]byte, error) {
	t := m.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	return m.wait(ctx, key, t)
}

// wait is Get with an explicit timeout (the TCP server passes the
// client's); timeout <= 0 looks once without waiting.
func (m *MemStore) wait(ctx context.Context, key string, timeout time.Duration) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	var timer *time.Timer
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, ErrClosed
		}
		if v, ok := m.data[key]; ok {
			out := append([]byte{}, v...)
			m.mu.Unlock()
			return out, nil
		}
		ch := m.changed
		m.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(timeout)
			defer timer.Stop()
		}
		select {
		case <-ch:
		case <-m.done:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("rendezvous: get %q: %w", key, ctx.Err())
		case <-timer.C:
			return nil, fmt.Errorf("rendezvous: get %q: %w: not set within %v", key, ErrTimeout, timeout)
		}
	}
}

// Add adds delta to the counter at key and returns the new value.
func (m *MemStore) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	var cur int64
	if v, ok := m.data[key]; ok {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("rendezvous: add to %q: %w (value is %d bytes)", key, ErrNotCounter, len(v))
		}
		cur = n
	}
	cur += delta
	m.data[key] = strconv.AppendInt(nil, cur, 10)
	m.notify()
	return cur, nil
}

// Close fails every waiting and later call with ErrClosed.
func (m *MemStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.done)
	}
	return nil
}
