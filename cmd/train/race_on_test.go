//go:build race

package main

// raceEnabled: the race detector is on (tests too slow under it skip).
const raceEnabled = true
