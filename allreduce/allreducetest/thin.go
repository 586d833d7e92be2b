package allreducetest

// The matrix under the race detector. The detector checks the goroutines'
// memory accesses: what matters to it is that every code path that runs
// concurrently (each algorithm, collective, transport, mode and the
// chunking at every edge length) runs at least once, not every operator
// and element type at every rank count, whose combine kernels are the same
// sequential loops, nor the large length several times, which costs ten
// times as much under it. The plain go test runs the matrix whole.

// raceFullRanks is the largest rank count whose lengths each run every op
// × dtype under Thin (MatrixConfig.FullRanks is lowered to it).
const raceFullRanks = 3

// raceHugeRanks is the fewest ranks a huge cell runs on under Thin: on 1
// or 2 the algorithms' chunking has no middle rank.
const raceHugeRanks = 3

// Thin reports whether the matrices run their deterministic race subset:
// under the race detector, unless RINGDDP_SOAK=1 asks for everything.
// In it, Matrix
//   - runs every op × dtype only up to raceFullRanks ranks, and above that
//     ThinCells cells per length of the rotation (every length, so 0, 1,
//     N-1, N, N+1 and uneven chunks, still runs on every rank count);
//   - runs each 16-bit type at one length per rank count (the last),
//     the type alternating with the rank count;
//   - runs the huge length once per collective and algorithm: at the
//     first rank count of at least raceHugeRanks that Huge gives for it,
//     with its first op and dtype, synchronously.
//
// Other suites use it to cut their repetitions the same way.
func Thin() bool { return RaceEnabled && !Soak() }

// ThinPair reports whether the i-th case runs with the j-th algorithm (or
// other variant) in the race subset: every other pair, so that every case
// runs with half of the algorithms and every algorithm with half of the
// cases (all of them outside the subset).
func ThinPair(i, j int) bool { return !Thin() || (i+j)%2 == 0 }
