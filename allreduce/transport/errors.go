package transport

import (
	"errors"
	"fmt"
)

// Sentinel errors. Transports wrap them so callers can test with errors.Is.
var (
	// ErrClosed: this endpoint was closed.
	ErrClosed = errors.New("transport: endpoint closed")
	// ErrPeer: a peer closed, died, aborted or became unreachable.
	ErrPeer = errors.New("transport: peer failed")
	// ErrTimeout: nothing moved on a blocking call for the transport's timeout.
	ErrTimeout = errors.New("transport: timed out")
	// ErrMismatch: the two sides of a message disagree on what it is.
	ErrMismatch = errors.New("transport: collective mismatch")
	// ErrInvalid: a caller passed an impossible argument (rank out of range, ...).
	ErrInvalid = errors.New("transport: invalid argument")
)

// PeerError reports that rank Peer failed; Err is the reason as seen here
// (for an abort, the peer's own cause).
type PeerError struct {
	Peer int
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("rank %d failed: %v", e.Peer, e.Err) }

// Unwrap lets errors.Is find both ErrPeer and the underlying cause.
func (e *PeerError) Unwrap() []error { return []error{ErrPeer, e.Err} }

// MismatchError reports that rank Peer sent (or expected) a message whose
// header or length differs from this rank's. Local is this rank's header and
// length, Remote the peer's.
type MismatchError struct {
	Peer        int
	Local       Header
	LocalBytes  int
	Remote      Header
	RemoteBytes int
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("collective mismatch with rank %d: here {%v, %d bytes}, rank %d {%v, %d bytes}",
		e.Peer, e.Local, e.LocalBytes, e.Peer, e.Remote, e.RemoteBytes)
}

// Unwrap makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// TimeoutError reports a blocking call that saw no progress for After.
type TimeoutError struct {
	Peer  int
	What  string // "send" or "recv"
	After string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s with rank %d: no progress for %s", e.What, e.Peer, e.After)
}

// Unwrap makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Unwrap() error { return ErrTimeout }
