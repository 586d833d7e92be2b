//go:build race

package hoststest

// raceEnabled reports whether the race detector is on: the tests skip
// under it, as the commands they run are built without it (the bed's own
// code runs under it in package testbed's tests).
const raceEnabled = true
