package shm

import (
	"errors"

	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
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

// AbortError is the cause a peer recorded in its status block when it
// aborted: its Rank, its Cause as text, and whether it was a collective
// Mismatch (then errors.Is(err, transport.ErrMismatch) holds, and Detail,
// when the block carried the mismatch record, is the
// *transport.MismatchError). It is the same type as tcp.AbortError.
type AbortError = mpconn.AbortError
