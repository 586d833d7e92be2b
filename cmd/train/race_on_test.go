//go:build race

package main

// raceEnabled: the tests of real tcp jobs with healing skip under the race
// detector (each takes seconds).
const raceEnabled = true
