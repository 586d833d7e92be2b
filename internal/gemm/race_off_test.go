//go:build !race

package gemm

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
