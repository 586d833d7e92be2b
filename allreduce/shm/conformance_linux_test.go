//go:build linux

package shm_test

import (
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/shm"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/allreduce/transport/transporttest"
)

// TestConformance runs the transport conformance suite over shm ranks in
// this process: with the default spin, with calls that sleep on the futex
// at once, and with the smallest rings (2 slots of 4 KiB: every message
// over 8 KiB wraps around the ring).
func TestConformance(t *testing.T) {
	for _, mode := range []struct {
		name string
		mod  func(*shm.Config)
	}{
		{"spin", nil},
		{"sleep", func(c *shm.Config) { c.Spin = -1 }},
		{"tiny", func(c *shm.Config) { c.Slots, c.SlotSize = 2, 4<<10 }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, n int) []transport.Conn {
				return allreducetest.Conns(shmConnsWith(t, n, mode.mod))
			})
		})
	}
}

// TestCollectivesOverShm is the collective matrix, reduced as for tcp
// (allreducetest.ReducedMatrix): ranks 1..5, {Sum, Max} × {float32,
// int64}, every AllReduce algorithm shm can run, every collective once at
// 2^18+3 elements on 3 ranks.
func TestCollectivesOverShm(t *testing.T) {
	cfg := allreducetest.ReducedMatrix(shmConnect)
	cfg.Timeout = 2 * time.Minute
	allreducetest.Matrix(t, cfg)
}

// TestShiftOverShm is allreducetest.ShiftSuite over shared memory: 1 to 5
// ranks, buffers larger than a slot among them.
func TestShiftOverShm(t *testing.T) {
	allreducetest.ShiftSuite(t, shmConnect, []int{1, 2, 3, 4, 5}, true)
}
