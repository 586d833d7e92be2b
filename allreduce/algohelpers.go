package allreduce

import "fmt"

// Helpers every algorithm uses: the checks of a call's buffers, the test
// knobs of the segmented algorithms, and small arithmetic.

// checkLen reports a buffer (what) of got bytes where the call needs want.
func (g *Group) checkLen(what string, got, want int) error {
	if got != want {
		return errLen(what, got, want)
	}
	return nil
}

// errLen is checkLen's error.
func errLen(what string, got, want int) error {
	return fmt.Errorf("%w: %s is %d bytes, want %d", ErrInvalid, what, got, want)
}

// sameBytes reports whether a and b are the same memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// tuning is a Group's segment sizes and thresholds for the pipelined and
// large-message algorithms; zero fields take the defaults. Tests shrink
// them so that multi-segment paths run on small inputs (export_test.go).
type tuning struct {
	treeSegment  int // bytes per segment of Tree (treeSegmentBytes)
	chainSegment int // bytes per segment of the pipelined chains (chainSegments)
	chainMin     int // smallest Broadcast or Reduce sent by chain; 0: the cost model's choice (pickFixed)
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// mod is a mod n in [0, n), for ring neighbours.
func mod(a, n int) int { return ((a % n) + n) % n }
