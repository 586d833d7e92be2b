//go:build !race

package calibrate

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
