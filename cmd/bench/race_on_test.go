//go:build race

package main

// raceEnabled reports whether the race detector is on: tests that run the
// simulator at scale skip under it (they run in the plain go test).
const raceEnabled = true
