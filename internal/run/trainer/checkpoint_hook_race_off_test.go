//go:build !race

package trainer

// underRace: the race detector is on (see checkpoint_hook_race_on_test.go).
const underRace = false
