package main

import (
	"sync"

	"github.com/ringddp/ringddp/allreduce"
)

// seed makes the inputs; every process of a multi-process run derives the
// same inputs from it, so each can compute the reference on its own.
const seed = 1

// dataset holds what the local ranks share: every rank's input (made once, at
// the largest count) and the expected result of the current size. A
// multi-process transport would regenerate the inputs of remote ranks from
// the seed; in process they are the ranks' own.
type dataset[T allreduce.Numeric] struct {
	cfg      *config
	maxCount int

	mu       sync.Mutex
	inputs   [][]T
	expCount int
	exp      []T

	// bufs are the ranks' output buffers, each rank's made by that rank
	// (its own element only) and kept for the next sweep's rank.
	bufs [][]T
}

// newDataset is the dataset of cfg's rows with real payloads (every row
// but the simulator's timing-only ones).
func newDataset[T allreduce.Numeric](cfg *config) *dataset[T] {
	return &dataset[T]{
		cfg:      cfg,
		maxCount: cfg.realCount(),
		inputs:   make([][]T, cfg.ranks),
		bufs:     make([][]T, cfg.ranks),
		expCount: -1,
	}
}

// input is rank's input at the largest count.
func (d *dataset[T]) input(rank int) []T {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inputLocked(rank)
}

func (d *dataset[T]) inputLocked(rank int) []T {
	if d.inputs[rank] == nil {
		d.inputs[rank] = inputOf[T](seed, rank, d.maxCount, d.cfg.redop)
	}
	return d.inputs[rank]
}

// buffer is rank's in/out buffer (the output of reduce-scatter: a chunk),
// made at the largest count on the rank's first sweep and reused by the
// next sweeps, one after another.
func (d *dataset[T]) buffer(rank int) []T {
	if d.bufs[rank] == nil {
		n := d.maxCount
		if d.cfg.op.kind == allreduce.KindReduceScatter {
			n /= d.cfg.ranks
		}
		d.bufs[rank] = make([]T, n)
	}
	return d.bufs[rank]
}

// expected is the full result of the collective on count elements (for
// all-reduce, reduce-scatter and reduce the reduction of every rank's
// input, for all-gather the concatenation of every rank's chunk, for
// broadcast the root's input). It is computed once per size by the first
// rank that asks, and never modified afterwards.
func (d *dataset[T]) expected(count int) []T {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.expCount == count {
		return d.exp
	}
	n := d.cfg.ranks
	var exp []T
	switch d.cfg.op.kind {
	case allreduce.KindAllReduce, allreduce.KindReduceScatter, allreduce.KindReduce:
		ins := make([][]T, n)
		for r := range ins {
			ins[r] = d.inputLocked(r)[:count]
		}
		exp = reduceOf(ins, d.cfg.redop)
	case allreduce.KindAllGather:
		exp = make([]T, count)
		for r := range n {
			lo, hi := allreduce.ChunkBounds(count, n, r)
			copy(exp[lo:hi], d.inputLocked(r)[lo:hi])
		}
	case allreduce.KindBroadcast:
		exp = d.inputLocked(d.cfg.root)[:count]
	}
	d.exp, d.expCount = exp, count
	return exp
}
