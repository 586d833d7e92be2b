//go:build linux

package shm

import (
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// doorbell is a rank's wake-up word pair in its own file: seq, the futex
// word, and sleepers, how many of the rank's calls are (about to be)
// asleep on it. A waiter increments sleepers, reads seq, checks its rings
// once more and sleeps on seq only if nothing changed (FUTEX_WAIT returns
// at once if seq moved). Whoever publishes something for the rank stores
// it first, then reads sleepers and, if any, increments seq and wakes
// them (FUTEX_WAKE): with sequentially consistent atomics on both sides
// either the waiter sees the new data or the waker sees the sleeper. The
// futexes are shared (not FUTEX_PRIVATE): the word is in a MAP_SHARED
// mapping of the same file in several processes.
type doorbell struct {
	seq, sleepers *uint32
}

// ring wakes the bell's sleepers, if any.
func (d doorbell) ring() {
	if atomic.LoadUint32(d.sleepers) != 0 {
		d.force()
	}
}

// force wakes every sleeper whether or not it has registered.
func (d doorbell) force() {
	atomic.AddUint32(d.seq, 1)
	futexWake(d.seq)
}

// arm registers a sleeper and returns the seq to sleep on.
func (d doorbell) arm() uint32 {
	atomic.AddUint32(d.sleepers, 1)
	return atomic.LoadUint32(d.seq)
}

func (d doorbell) disarm() { atomic.AddUint32(d.sleepers, ^uint32(0)) }

// sleep waits until seq moves from snap, a wake, or d passes.
func (d doorbell) sleep(snap uint32, dur time.Duration) {
	futexWait(d.seq, snap, dur)
}

const (
	futexWaitOp = 0 // FUTEX_WAIT, shared
	futexWakeOp = 1 // FUTEX_WAKE, shared
)

func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(max(d, time.Microsecond)))
	// Blocking: the runtime hands this thread's P to other goroutines.
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(addr *uint32) {
	_, _, _ = unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, math.MaxInt32, 0, 0, 0)
}
