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

// MismatchError reports that two ranks disagree on a message: rank Rank
// sent (or expected) Local and LocalBytes, rank Peer Remote and
// RemoteBytes. Rank is the rank that found the disagreement or, for the
// sender of a refused message, the rank whose message was refused; either
// way Local is Rank's own header. The error keeps these ranks when it
// travels to other ranks inside an abort cause (a *PeerError), so a rank
// that receives it can tell whether its own call is one of the two.
type MismatchError struct {
	Rank        int
	Peer        int
	Local       Header
	LocalBytes  int
	Remote      Header
	RemoteBytes int
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("collective mismatch between rank %d {%v, %d bytes} and rank %d {%v, %d bytes}",
		e.Rank, e.Local, e.LocalBytes, e.Peer, e.Remote, e.RemoteBytes)
}

// Involves reports whether rank is one of the two ranks that disagree.
func (e *MismatchError) Involves(rank int) bool { return e.Rank == rank || e.Peer == rank }

// From returns the mismatch as rank sees it (its own header Local), and
// false if rank is neither side.
func (e *MismatchError) From(rank int) (*MismatchError, bool) {
	switch rank {
	case e.Rank:
		return e, true
	case e.Peer:
		return &MismatchError{Rank: e.Peer, Peer: e.Rank, Local: e.Remote, LocalBytes: e.RemoteBytes, Remote: e.Local, RemoteBytes: e.LocalBytes}, true
	}
	return nil, false
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
