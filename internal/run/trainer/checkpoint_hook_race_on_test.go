//go:build race

package trainer

// underRace: the race detector is on (checkpoint_hook_test.go skips its
// whole-run tests, ~20 s under it).
const underRace = true
