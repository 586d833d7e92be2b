package launch

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// TestBindPinsEveryThread: Bind pins every thread of the process, those
// started after it too, to its share; the test restores the mask. Not
// parallel: processes other tests start meanwhile would inherit the mask.
func TestBindPinsEveryThread(t *testing.T) {
	allowed, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pinProcess(allowed); err != nil {
			t.Fatalf("restoring the affinity: %v", err)
		}
	}()
	size := len(allowed) + 1 // oversubscribed: the last local rank gets allowed[size-1 mod n]
	env := rendezvous.Env{LocalRank: size - 1, LocalWorldSize: size}
	cpus, err := Bind(env, func(string) string { return "core" })
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{allowed[(size-1)%len(allowed)]}; !slices.Equal(cpus, want) {
		t.Fatalf("bound to %v, want %v", cpus, want)
	}
	// Start threads after the binding: they inherit it.
	done := make(chan struct{})
	var started sync.WaitGroup
	for range 4 {
		started.Add(1)
		go runtimeLockOSThreadFor(&started, done)
	}
	started.Wait()
	defer close(done)
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			continue // exited
		}
		if set.Count() != 1 || !set.IsSet(cpus[0]) {
			t.Errorf("thread %d may run on %d processors, want only %d", tid, set.Count(), cpus[0])
		}
	}
}

// runtimeLockOSThreadFor holds a thread of its own until done closes.
func runtimeLockOSThreadFor(started *sync.WaitGroup, done chan struct{}) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	started.Done()
	<-done
}
