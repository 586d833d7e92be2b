package shm

import (
	"errors"

	"github.com/ringddp/ringddp/allreduce/transport"
)

func asMismatch(err error) (*transport.MismatchError, bool) {
	var mm *transport.MismatchError
	ok := errors.As(err, &mm)
	return mm, ok
}

func isMismatch(err error) bool { return errors.Is(err, transport.ErrMismatch) }
