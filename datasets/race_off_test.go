//go:build !race

package datasets

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
