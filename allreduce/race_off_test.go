//go:build !race

package allreduce_test

// raceEnabled: the race detector allocates, so allocation counts are only
// checked without it.
const raceEnabled = false
