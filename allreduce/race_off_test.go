//go:build !race

package allreduce_test

// raceEnabled reports whether the race detector is on: allocation counts
// are only checked without it (it allocates), and the matrices run a
// deterministic subset under it (every algorithm, collective and fault
// path still once, on the chunking edge lengths), the plain go test
// running them whole.
const raceEnabled = false
