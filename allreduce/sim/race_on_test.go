//go:build race

package sim_test

// raceEnabled: the race detector slows the 1024-rank runs tenfold.
const raceEnabled = true
