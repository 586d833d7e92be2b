package allreduce

import "context"

// Work is the handle of an asynchronous collective, like c10d's Work. The
// buffers passed to the call belong to the collective until Done is closed.
type Work struct {
	done chan struct{}
	err  error
}

func newWork() *Work { return &Work{done: make(chan struct{})} }

func (w *Work) finish(err error) {
	w.err = err
	close(w.done)
}

// Done is closed when the collective has finished, successfully or not.
func (w *Work) Done() <-chan struct{} { return w.done }

// Err is the collective's error once Done is closed, and nil before. It
// returns the same value on every call.
func (w *Work) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// Wait blocks until the collective finishes and returns its error, or until
// ctx ends and returns ctx.Err(). Giving up on the wait does not stop the
// collective: its buffers stay in use until Done is closed.
func (w *Work) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	default:
	}
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitAll waits for every Work and returns the first error among them.
func WaitAll(ctx context.Context, works ...*Work) error {
	var first error
	for _, w := range works {
		if err := w.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
