package allreduce

import "fmt"

// Combine sets out[i] = a[i] op b[i] for every element of type dt in the
// three buffers: the reduce kernel the collectives run on each received
// payload (combineBytes), exported so that commands can time it, as
// `cmd/bench -calibrate` does for the cost model's Gamma. out may alias a
// or b. The buffers must have the same length, a multiple of dt's size.
func Combine(dt DType, op ReduceOp, out, a, b []byte) error {
	if dt.Size() == 0 || !op.valid() {
		return fmt.Errorf("%w: Combine of dtype %v, op %v", ErrInvalid, dt, op)
	}
	if len(a) != len(out) || len(b) != len(out) || len(out)%dt.Size() != 0 {
		return fmt.Errorf("%w: Combine of %d, %d and %d bytes of %v", ErrInvalid, len(out), len(a), len(b), dt)
	}
	combineBytes(dt, op, out, a, b)
	return nil
}
