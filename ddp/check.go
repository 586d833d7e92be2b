package ddp

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"
	"unsafe"

	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/allreduce"
)

// checkSameShapes gathers every rank's (parameter count, element count,
// hash of the shapes) and fails on every rank, naming the ranks, if any
// differs from rank 0's.
func checkSameShapes(ctx context.Context, g *allreduce.Group, values []*tensor.Dense) error {
	h := fnv.New64a()
	total := 0
	var buf [8]byte
	for _, v := range values {
		s := v.Shape()
		binary.LittleEndian.PutUint64(buf[:], uint64(len(s)))
		h.Write(buf[:])
		for _, dim := range s {
			binary.LittleEndian.PutUint64(buf[:], uint64(dim))
			h.Write(buf[:])
		}
		total += s.TotalSize()
	}
	mine := []int64{int64(len(values)), int64(total), int64(h.Sum64())}
	all := make([]int64, 3*g.Size())
	if err := allreduce.AllGather(ctx, g, all, mine); err != nil {
		return fmt.Errorf("ddp: comparing parameter shapes across ranks: %w", err)
	}
	var bad []string
	for r := 1; r < g.Size(); r++ {
		if all[3*r] != all[0] || all[3*r+1] != all[1] || all[3*r+2] != all[2] {
			bad = append(bad, fmt.Sprintf("rank %d has %d parameters of %d elements", r, all[3*r], all[3*r+1]))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("ddp: ranks disagree on the model: rank 0 has %d parameters of %d elements, %s (shapes differ)",
			all[0], all[1], strings.Join(bad, ", "))
	}
	return nil
}

// CheckReplicas verifies that every rank holds bitwise the same parameters.
// It fails on every rank, naming those that differ from rank 0.
func (d *DDP[T]) CheckReplicas(ctx context.Context) error {
	h := fnv.New64a()
	if len(d.paramArena) > 0 {
		var z T
		h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&d.paramArena[0])), len(d.paramArena)*int(unsafe.Sizeof(z))))
	}
	mine := []int64{int64(h.Sum64())}
	all := make([]int64, d.group.Size())
	if err := allreduce.AllGather(ctx, d.group, all, mine); err != nil {
		return fmt.Errorf("ddp: replica check: %w", err)
	}
	var bad []string
	for r, x := range all {
		if x != all[0] {
			bad = append(bad, fmt.Sprint(r))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("ddp: replicas diverged after step %d: ranks %s differ from rank 0", d.steps, strings.Join(bad, ", "))
	}
	return nil
}
