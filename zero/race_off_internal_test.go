//go:build !race

package zero

// raceOn: the race detector is on (the internal tests run fewer cases).
const raceOn = false
