//go:build race

package allreduce_test

const raceEnabled = true
