//go:build !race

package mixed_test

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
