//go:build !race

package allreducetest

// RaceEnabled reports whether the race detector is on (see Thin).
const RaceEnabled = false
