//go:build race

package gemm

// raceEnabled reports whether the race detector is on: the exhaustive
// sweeps against the reference then run on a few shapes only (they run
// whole in the plain go test; the threads test runs whole in both).
const raceEnabled = true
