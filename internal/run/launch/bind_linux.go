package launch

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// allowedCPUs is the processors this thread may run on, in order.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// pinProcess sets the affinity of every thread of this process to cpus.
// A thread inherits its creator's mask, so threads the Go runtime starts
// later are pinned too; the walk repeats until it finds no thread it has
// not pinned (one may start during the first).
func pinProcess(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	done := map[int]bool{}
	for {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh = true
			if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
				return err
			}
			done[tid] = true
		}
		if !fresh {
			return nil
		}
	}
}
