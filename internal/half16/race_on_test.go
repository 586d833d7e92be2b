//go:build race

package half16_test

// raceEnabled: the race detector slows the scalar reference loops about
// tenfold, so the large random sets shrink under it.
const raceEnabled = true
