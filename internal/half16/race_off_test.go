//go:build !race

package half16_test

const raceEnabled = false
