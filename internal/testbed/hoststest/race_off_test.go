//go:build !race

package hoststest

// raceEnabled reports whether the race detector is on.
const raceEnabled = false
