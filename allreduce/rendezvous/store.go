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
	// ErrLimit: a request was refused because it would exceed one of the
	// store's limits (the error names it): too large a value, too many
	// keys or bytes stored, too many request bytes in flight at the server.
	ErrLimit = errors.New("rendezvous: store limit reached")
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
	// DefaultMaxKeys is how many keys a TCP store server holds unless
	// configured otherwise (StoreConfig.MaxKeys).
	DefaultMaxKeys = 1 << 16
	// DefaultMaxStoredBytes is how many bytes a TCP store server holds
	// unless configured otherwise (StoreConfig.MaxStoredBytes), keys and
	// values with EntryOverhead per key.
	DefaultMaxStoredBytes = 32 << 20
	// EntryOverhead is what one key costs against a MaxStoredBytes limit
	// beyond the bytes of the key and of its value: the map entry and the
	// allocations' headers.
	EntryOverhead = 64
)

// MemStore is a Store in memory, for ranks in one process and tests.
// The zero value is not ready: use NewMemStore.
type MemStore struct {
	// Timeout bounds every Get whose context has no earlier deadline;
	// DefaultTimeout unless changed before use.
	Timeout time.Duration
	// MaxKeys, when positive, bounds how many keys the store holds: a Set
	// or Add that would make a new key beyond it fails with ErrLimit.
	// Set before use.
	MaxKeys int
	// MaxStoredBytes, when positive, bounds the bytes the store holds,
	// counted as len(key) + len(value) + EntryOverhead per key: a Set or
	// Add that would exceed it fails with ErrLimit. Set before use.
	MaxStoredBytes int64

	mu      sync.Mutex
	data    map[string][]byte
	stored  int64         // bytes held, as MaxStoredBytes counts them
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
	return m.set(key, append([]byte{}, value...))
}

// set stores v under key, which the store owns from now on.
func (m *MemStore) set(key string, v []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if err := m.charge(key, v); err != nil {
		return fmt.Errorf("rendezvous: set %q: %w", key, err)
	}
	m.data[key] = v
	m.notify()
	return nil
}

// entrySize is what key holding v costs against MaxStoredBytes.
func entrySize(key string, v []byte) int64 {
	return int64(len(key)) + int64(len(v)) + EntryOverhead
}

// limitError is a store limit refusing a request; it wraps ErrLimit, and
// detail says which limit.
type limitError struct{ detail string }

func (e *limitError) Error() string { return ErrLimit.Error() + ": " + e.detail }

func (e *limitError) Unwrap() error { return ErrLimit }

// charge accounts for key taking the value v, or fails with a limitError
// and changes nothing; called with mu held.
func (m *MemStore) charge(key string, v []byte) error {
	delta := entrySize(key, v)
	old, exists := m.data[key]
	if exists {
		delta -= entrySize(key, old)
	} else if m.MaxKeys > 0 && len(m.data) >= m.MaxKeys {
		return &limitError{fmt.Sprintf("the store already holds %d keys, its limit (MaxKeys)", len(m.data))}
	}
	if m.MaxStoredBytes > 0 && delta > 0 && m.stored+delta > m.MaxStoredBytes {
		return &limitError{fmt.Sprintf("%d more bytes would pass the store's limit of %d bytes stored (MaxStoredBytes; %d stored)",
			delta, m.MaxStoredBytes, m.stored)}
	}
	m.stored += delta
	return nil
}

// usage reports how many keys and bytes (as MaxStoredBytes counts them)
// the store holds.
func (m *MemStore) usage() (keys int, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.data), m.stored
}

// Get waits for key to be set and returns a copy of its value.
func (m *MemStore) Get(ctx context.Context, key string) ([]byte, error) {
	t := m.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	return m.wait(ctx, key, t, false)
}

// wait is Get with an explicit timeout (the TCP server passes its own);
// timeout <= 0 looks once without waiting. With shared it returns the
// stored slice itself, which the caller must not modify (the store never
// does: a Set or Add replaces the slice), instead of a copy.
func (m *MemStore) wait(ctx context.Context, key string, timeout time.Duration, shared bool) ([]byte, error) {
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
			if !shared {
				v = append([]byte{}, v...)
			}
			m.mu.Unlock()
			return v, nil
		}
		ch := m.changed
		m.mu.Unlock()
		if timeout <= 0 {
			return nil, fmt.Errorf("rendezvous: get %q: %w: not set", key, ErrTimeout)
		}
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
	v := strconv.AppendInt(nil, cur, 10)
	if err := m.charge(key, v); err != nil {
		return 0, fmt.Errorf("rendezvous: add to %q: %w", key, err)
	}
	m.data[key] = v
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
