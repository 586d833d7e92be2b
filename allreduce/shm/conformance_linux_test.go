//go:build linux

package shm_test

import (
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
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

// shmHugeLen is the large length of the shm matrix: 1 MiB of float32,
// many slots per message.
const shmHugeLen = 1<<18 + 3

func shmHuge(coll allreduce.Kind, _ allreduce.Algorithm, n int) ([]allreduce.ReduceOp, []allreduce.DType) {
	if n != 3 || testing.Short() {
		return nil, nil
	}
	op := allreduce.Sum
	if coll == allreduce.KindAllGather || coll == allreduce.KindBroadcast {
		op = 0
	}
	return []allreduce.ReduceOp{op}, []allreduce.DType{allreduce.Float32}
}

// TestCollectivesOverShm is the collective matrix, reduced as for tcp:
// ranks 1..5, {Sum, Max} × {float32, int64}, every AllReduce algorithm
// shm can run, every collective once at 2^18+3 elements on 3 ranks.
func TestCollectivesOverShm(t *testing.T) {
	allreducetest.Matrix(t, allreducetest.MatrixConfig{
		Connect: shmConnect,
		Ranks:   []int{1, 2, 3, 4, 5},
		Ops:     []allreduce.ReduceOp{allreduce.Sum, allreduce.Max},
		DTypes:  []allreduce.DType{allreduce.Float32, allreduce.Int64},
		Huge:    shmHuge,
		HugeLen: shmHugeLen,
		Timeout: 2 * time.Minute,
	})
}
