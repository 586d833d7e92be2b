package shm

import (
	"errors"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Errors of the package, for errors.Is.
var (
	// ErrUnsupported: shared memory between processes needs Linux
	// (memfd_create, futexes, SCM_RIGHTS).
	ErrUnsupported = errors.New("shm: the shared-memory transport needs linux")
	// ErrNoSpace: the rings' shared memory could not be allocated or
	// mapped (memory or the memory cgroup is short); nothing was mapped,
	// so no access can fault later.
	ErrNoSpace = errors.New("shm: no room for the shared-memory rings")
	// ErrCorrupt: something read from a peer's shared memory is malformed
	// (a slot header's checksum, magic, sequence number, offset or
	// length, a ring index out of bounds, a status record): the link
	// fails; nothing from it is used.
	ErrCorrupt = errors.New("shm: corrupted shared memory")
	// ErrAuth: a peer failed authentication or refused ours.
	ErrAuth = errors.New("shm: authentication failed")
	// ErrProtocol: a peer sent something that is not this protocol.
	ErrProtocol = errors.New("shm: protocol error")
)

// errPeerClosed: the peer closed its endpoint (its goodbye status).
var errPeerClosed = errors.New("closed its endpoint")

// AbortError is the cause a peer recorded when it aborted. It unwraps to
// transport.ErrMismatch when the peer aborted over a collective mismatch,
// and then also to the *transport.MismatchError it carried.
type AbortError struct {
	Rank     int                      // the rank that aborted
	Cause    string                   // its cause, as text
	Mismatch bool                     // the cause was a collective mismatch
	Detail   *transport.MismatchError // the mismatch, when the cause was one
}

func (e *AbortError) Error() string { return "aborted: " + e.Cause }

// Is makes errors.Is(err, transport.ErrMismatch) hold for a mismatch abort.
func (e *AbortError) Is(target error) bool { return e.Mismatch && target == transport.ErrMismatch }

// Unwrap exposes the mismatch the abort carried, if any.
func (e *AbortError) Unwrap() error {
	if e.Detail == nil {
		return nil
	}
	return e.Detail
}
