//go:build race

package calibrate

// raceEnabled reports whether the race detector is on: the refit's
// recovery tests, single-goroutine arithmetic with nothing to race, run in
// the plain go test only (the detector makes them take over a minute).
const raceEnabled = true
