package main

import (
	"errors"
	"fmt"

	"github.com/ringddp/ringddp/internal/run/launch"
)

// scaleUpFlags checks -nnodes MIN:MAX (MIN < MAX: nodes may join the
// running job; launch's nodes_scaleup.go): a new node's ranks join as
// healed joiners, which needs -on-failure continue -heal, and no spares
// (they would run on node 0 and take the new nodes' places). It runs
// over tcp or auto (a new node's ranks are placed on their node in the
// grown plan: shm with their node-mates, tcp with the others; shm is
// one host's and refuses -nnodes above 1), with DDP or with -zero1,
// whose -heal needs -zero-buddies (healFlags): the grown group re-shards
// the optimizer state as a heal does — from a start of two ranks or more:
// a ZeRO-1 group of one rank keeps no buddy copy, so it cannot grow.
func scaleUpFlags(tr *launch.Transport, onFailure string, heal, zero1 bool, spares int) error {
	if tr.MP == nil || tr.MP.MaxNodes <= tr.MP.Nnodes {
		return nil
	}
	n := fmt.Sprintf("-nnodes %d:%d", tr.MP.Nnodes, tr.MP.MaxNodes)
	switch {
	case onFailure != launch.OnFailureContinue || !heal:
		return errors.New(n + " lets nodes join the running job, which needs -on-failure continue -heal (a new node's ranks heal from the others)")
	case zero1 && tr.MP.Nnodes*tr.MP.LocalRanks < 2:
		return errors.New(n + " with -zero1 starts a ZeRO-1 group of one rank, which keeps no buddy copy of its shard and so cannot grow: start on 2 ranks or more (-ranks, or MIN)")
	case spares > 0:
		return errors.New(n + " with -spares: a spare would run on node 0 and take a new node's place; across node launchers a node's ranks come with its launcher")
	}
	return nil
}
