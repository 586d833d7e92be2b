package mpconn

import (
	"fmt"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/untrusted"
)

// Defaults of the configuration fields tcp and shm have in common.
const (
	DefaultRunID            = "default"
	DefaultTimeout          = 30 * time.Second // as gloo
	DefaultConnectTimeout   = 5 * time.Minute
	DefaultHandshakeTimeout = 2 * time.Second
	DefaultMaxMessage       = 1 << 30
	// MaxRunID bounds a run id, in bytes.
	MaxRunID = 255
)

// CheckJob checks and defaults the fields that place a rank in its job,
// for transport name: rank of size, the run id (DefaultRunID when empty;
// at most MaxRunID printable bytes), and with more than one rank a store
// and a secret that passes rendezvous.CheckSecret, unless insecure.
func CheckJob(name string, rank, size int, runID *string, store rendezvous.Store, secret []byte, insecure bool) error {
	if size < 1 || rank < 0 || rank >= size {
		return fmt.Errorf("%s: rank %d of %d: %w", name, rank, size, transport.ErrInvalid)
	}
	if *runID == "" {
		*runID = DefaultRunID
	}
	if len(*runID) > MaxRunID || untrusted.Printable([]byte(*runID)) != *runID {
		return fmt.Errorf("%s: run id %q: %w (want at most %d printable bytes)", name, *runID, transport.ErrInvalid, MaxRunID)
	}
	if size > 1 {
		if store == nil {
			return fmt.Errorf("%s: %w: no rendezvous store for %d ranks", name, transport.ErrInvalid, size)
		}
		if !insecure {
			if len(secret) == 0 {
				return fmt.Errorf("%s: %w: empty secret (set one, e.g. from RINGDDP_SECRET, or opt out with Config.Insecure)", name, transport.ErrInvalid)
			}
			if err := rendezvous.CheckSecret(secret); err != nil {
				return fmt.Errorf("%s: %w: %w", name, transport.ErrInvalid, err)
			}
		}
	}
	return nil
}

// DefaultLimits gives the time limits and the message bound their
// defaults where they are not positive, and fails a maxMessage over
// maxPayload (what the transport can carry).
func DefaultLimits(name string, timeout, connectTimeout, handshakeTimeout *time.Duration, maxMessage *int64, maxPayload int64) error {
	if *timeout <= 0 {
		*timeout = DefaultTimeout
	}
	if *connectTimeout <= 0 {
		*connectTimeout = DefaultConnectTimeout
	}
	if *handshakeTimeout <= 0 {
		*handshakeTimeout = DefaultHandshakeTimeout
	}
	if *maxMessage <= 0 {
		*maxMessage = DefaultMaxMessage
	}
	if *maxMessage > maxPayload {
		return fmt.Errorf("%s: %w: MaxMessage %d exceeds %d", name, transport.ErrInvalid, *maxMessage, maxPayload)
	}
	return nil
}
