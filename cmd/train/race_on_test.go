//go:build race

package main

// raceEnabled skips the tests too slow for the race detector (survivors
// across transports and node launchers: whole jobs of several processes).
const raceEnabled = true
