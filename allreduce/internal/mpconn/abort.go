package mpconn

import "github.com/ringddp/ringddp/allreduce/transport"

// AbortError is the cause a peer sent (tcp: its abort frame) or recorded
// (shm: its status block) when it aborted. It unwraps to
// transport.ErrMismatch when the peer aborted over a collective mismatch,
// and then also to the *transport.MismatchError it carried, so the ranks
// and calls of the mismatch survive the trip between processes: a rank
// that receives it can tell whether its own call is one of the two.
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
