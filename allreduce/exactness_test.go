package allreduce_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Every algorithm on in-process ranks: random programs of collectives on
// special values end bitwise identical across ranks, agree with the
// sequential reference and give the same bits run to run
// (allreducetest.CheckProgram). RINGDDP_SOAK=1 runs the goal's 10,000
// collectives per algorithm instead of the CI sample.

// inprocCase is an algorithm and the node size its worlds simulate
// (inproc.WithLocalSize; 0: no topology).
type inprocCase struct {
	algo      allreduce.Algorithm
	localSize int
}

func (c inprocCase) String() string {
	if c.localSize == 0 {
		return c.algo.String()
	}
	return fmt.Sprintf("%v/local=%d", c.algo, c.localSize)
}

// inprocAlgorithms is every algorithm in-process ranks can run: those
// that need a topology on simulated nodes of 2 and of 3 ranks (the last
// node smaller where that does not divide N), the others without one.
func inprocAlgorithms(t *testing.T) []inprocCase {
	plain, err := inprocConns(1, 0, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := inprocConns(1, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var out []inprocCase
	without := allreducetest.AlgorithmsFor(plain[0])
	for _, a := range without {
		out = append(out, inprocCase{a, 0})
	}
	for _, a := range allreducetest.AlgorithmsFor(topo[0]) {
		if !slices.Contains(without, a) {
			out = append(out, inprocCase{a, 2}, inprocCase{a, 3})
		}
	}
	return out
}

// inprocConns is a fresh in-process world of n ranks on simulated nodes
// of localSize (0: none).
func inprocConns(n, localSize int, timeout time.Duration) ([]transport.Conn, error) {
	w, err := inproc.NewWorld(n, inproc.WithTimeout(timeout), inproc.WithLocalSize(localSize))
	if err != nil {
		return nil, err
	}
	conns := make([]transport.Conn, n)
	for r := range conns {
		conns[r] = w.Conn(r)
	}
	return conns, nil
}

func TestExactnessSpecialValues(t *testing.T) {
	ranks := []int{1, 2, 3, 5, 8}
	perAlgorithm := 600
	if allreducetest.Soak() {
		perAlgorithm = 10000
	} else if testing.Short() || raceEnabled {
		// 5 programs: every rank count once. Under the race detector the
		// special values' arithmetic adds nothing; every algorithm's
		// collectives on every rank count still run under it.
		perAlgorithm = 200
	}
	const progLen = 40
	for _, algo := range inprocAlgorithms(t) {
		t.Run(algo.String(), func(t *testing.T) {
			done := 0
			for p := 0; done < perAlgorithm; p++ {
				n := ranks[p%len(ranks)]
				seed := uint64(p)*0x9e3779b97f4a7c15 + uint64(algo.algo) + uint64(algo.localSize)<<16
				prog := allreducetest.RandomProgram(seed, n, progLen, 20000)
				runTwiceAndCheck(t, fmt.Sprintf("program %d (seed %#x) on %d ranks", p, seed, n), n, algo.localSize, prog, allreduce.WithAlgorithm(algo.algo))
				done += len(prog)
			}
			t.Logf("%d collectives", done)
		})
	}
}

func runTwiceAndCheck(t *testing.T, what string, n, localSize int, prog []allreducetest.Op, opts ...allreduce.GroupOption) {
	t.Helper()
	var runs [2][]allreducetest.Outcome
	for i := range runs {
		if i == 1 && allreducetest.Thin() {
			runs[1] = runs[0] // run to run: the plain go test's check
			break
		}
		conns, err := inprocConns(n, localSize, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		runs[i], err = allreducetest.RunProgram(conns, prog, time.Minute, opts...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if err := allreducetest.CheckProgram(prog, runs[0]); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := allreducetest.SameOutcomes(runs[0], runs[1]); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// The mismatch matrix on in-process ranks: every case of
// allreducetest.MismatchCases × every algorithm × ranks {2, 3, 5, 8},
// repeated to catch rare orderings; every rank's error must name both
// calls with the right ranks (allreducetest.CheckMismatch).
// RINGDDP_SOAK=1 repeats until at least 5,000 trials per algorithm.
func TestMismatchMatrix(t *testing.T) {
	repeats := 2
	if allreducetest.Soak() {
		repeats = 20
	} else if testing.Short() || raceEnabled {
		// Under the race detector every case runs once: the repeat hunts
		// rare orderings, which the plain run does.
		repeats = 1
	}
	for j, algo := range inprocAlgorithms(t) {
		t.Run(algo.String(), func(t *testing.T) {
			trials := 0
			for rep := 0; rep < repeats; rep++ {
				for _, n := range []int{2, 3, 5, 8} {
					for i, m := range allreducetest.MismatchCases(n) {
						if !allreducetest.ThinPair(i, j) {
							continue // the race subset: half the pairs
						}
						conns, err := inprocConns(n, algo.localSize, 20*time.Second)
						if err != nil {
							t.Fatal(err)
						}
						errs := allreducetest.RunMismatch(conns, m, 30*time.Second, allreduce.WithAlgorithm(algo.algo))
						if err := allreducetest.CheckMismatch(m, errs); err != nil {
							t.Fatalf("repeat %d, %d ranks: %v", rep, n, err)
						}
						trials++
					}
				}
			}
			t.Logf("%d trials", trials)
		})
	}
}
