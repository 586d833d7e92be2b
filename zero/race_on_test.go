//go:build race

package zero_test

// raceEnabled: the race detector is on (long tests run fewer cases).
const raceEnabled = true
