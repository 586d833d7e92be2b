package rendezvous

import (
	"fmt"
	"math"
	"time"
)

// StoreConfig configures a StoreServer and its TCPStore clients. Zero
// fields take their defaults.
type StoreConfig struct {
	// Secret authenticates every connection (both directions). Required
	// unless Insecure.
	Secret []byte
	// Insecure runs without authentication: an explicit opt-out, for
	// tests and trusted single-user machines. Both ends must agree.
	Insecure bool
	// Timeout bounds every client call (a Get waits at most this long for
	// its key) when the caller's context has no earlier deadline. On the
	// server it is the job's timeout: no Get waits longer, whatever wait
	// the client asks for. Default DefaultTimeout.
	Timeout time.Duration
	// HandshakeTimeout bounds the authentication of a new connection, on
	// both ends: the server closes a connection that has not proved the
	// secret by then. Default DefaultStoreHandshakeTimeout.
	HandshakeTimeout time.Duration
	// IOTimeout bounds, on the server, reading the rest of a request once
	// its first byte has arrived, and writing a reply. Default
	// DefaultStoreIOTimeout; never more than Timeout.
	IOTimeout time.Duration
	// MaxValueLen is the longest value accepted (server) or read (client).
	// Default DefaultMaxValueLen.
	MaxValueLen int
	// MaxConns bounds the server's open connections, authenticated or not.
	// Default DefaultMaxConns.
	MaxConns int
	// MaxPending bounds the server's connections that have not
	// authenticated yet. A connection arriving at this limit, or at
	// MaxConns, is not refused: the server closes a pending connection to
	// make room (StoreServer.evictLocked: the newcomer's own host's oldest
	// once that host, counting the newcomer, holds as many as any other;
	// else the oldest of the host with the most), so that strangers holding
	// connections open cannot crowd out a rank, and one host's flood
	// evicts only its own. Only when every one of MaxConns connections has
	// authenticated is the newcomer refused. Default DefaultMaxPending.
	MaxPending int
	// MaxInFlightBytes bounds the request bodies (keys and values) the
	// server holds at once, over all its connections: a request that would
	// pass it is refused with an error wrapping ErrLimit before anything is
	// allocated for it. Default DefaultMaxInFlightBytes.
	MaxInFlightBytes int64
	// MaxUnreadReplyBytes bounds, per connection, the bytes of replies the
	// server has handed to the kernel that its client has not read: each
	// server connection's socket send buffer is set to it (SO_SNDBUF; Linux
	// reserves twice that), and the server reads a connection's next
	// request only once the reply to the last is in that buffer in whole,
	// so a client that sends requests without reading the replies stops
	// being read, and is closed when a reply has not gone within
	// IOTimeout. Other connections are not affected. Default
	// DefaultMaxUnreadReplyBytes.
	MaxUnreadReplyBytes int
	// MaxKeys bounds the keys the server stores: a Set or Add making a key
	// beyond it fails with ErrLimit. Default DefaultMaxKeys.
	MaxKeys int
	// MaxStoredBytes bounds the bytes the server stores, counted as
	// len(key) + len(value) + EntryOverhead per key: a Set or Add passing
	// it fails with ErrLimit. Default DefaultMaxStoredBytes.
	MaxStoredBytes int64
}

// Defaults of StoreConfig.
const (
	// DefaultStoreHandshakeTimeout is StoreConfig.HandshakeTimeout's
	// default: authenticating takes one round trip and two HMACs.
	DefaultStoreHandshakeTimeout = 2 * time.Second
	// DefaultStoreIOTimeout is StoreConfig.IOTimeout's default.
	DefaultStoreIOTimeout = 10 * time.Second
	// DefaultMaxConns is StoreConfig.MaxConns's default.
	DefaultMaxConns = 1024
	// DefaultMaxPending is StoreConfig.MaxPending's default.
	DefaultMaxPending = 64
	// DefaultMaxInFlightBytes is StoreConfig.MaxInFlightBytes's default: a
	// rendezvous moves kilobytes.
	DefaultMaxInFlightBytes = 16 << 20
	// DefaultMaxUnreadReplyBytes is StoreConfig.MaxUnreadReplyBytes's
	// default: a few round trips of a rendezvous's replies, and a
	// thirtieth of what Linux lets a send buffer grow to unset (4 MiB).
	DefaultMaxUnreadReplyBytes = 128 << 10
)

// withDefaults is c with its unset fields set to their defaults.
func (c StoreConfig) withDefaults() StoreConfig {
	orDefault(&c.Timeout, DefaultTimeout)
	orDefault(&c.HandshakeTimeout, DefaultStoreHandshakeTimeout)
	orDefault(&c.IOTimeout, DefaultStoreIOTimeout)
	c.IOTimeout = min(c.IOTimeout, c.Timeout)
	orDefault(&c.MaxValueLen, DefaultMaxValueLen)
	orDefault(&c.MaxConns, DefaultMaxConns)
	orDefault(&c.MaxPending, DefaultMaxPending)
	orDefault(&c.MaxInFlightBytes, DefaultMaxInFlightBytes)
	orDefault(&c.MaxUnreadReplyBytes, DefaultMaxUnreadReplyBytes)
	orDefault(&c.MaxKeys, DefaultMaxKeys)
	orDefault(&c.MaxStoredBytes, DefaultMaxStoredBytes)
	return c
}

// orDefault sets *v to d when it is not positive (unset).
func orDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// forServer is c with its defaults and the authentication mode, checked
// for a server.
func (c StoreConfig) forServer() (StoreConfig, byte, error) {
	c = c.withDefaults()
	mode, err := authMode(c.Secret, c.Insecure)
	if err != nil {
		return c, 0, err
	}
	return c, mode, c.checkServerLimits()
}

// checkServerLimits rejects limits a server cannot work with; c has its
// defaults.
func (c StoreConfig) checkServerLimits() error {
	if int64(c.MaxValueLen) > math.MaxUint32 {
		return fmt.Errorf("%w: MaxValueLen %d is beyond the protocol's 4 GiB", ErrInvalid, c.MaxValueLen)
	}
	if need := int64(MaxKeyLen) + int64(c.MaxValueLen); need > c.MaxInFlightBytes {
		return fmt.Errorf("%w: MaxInFlightBytes %d cannot hold one request with the longest key and value (%d bytes; MaxValueLen %d)",
			ErrInvalid, c.MaxInFlightBytes, need, c.MaxValueLen)
	}
	return nil
}
