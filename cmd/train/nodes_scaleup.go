package main

import (
	"errors"
	"fmt"
	"time"

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

// lastCallUsage is -last-call's help.
const lastCallUsage = "with -nnodes MIN:MAX (MIN < MAX), node 0's launcher: once nodes 0..MIN-1 have joined, how long it waits for nodes MIN..MAX-1 " +
	"before the first attempt starts (at once when all MAX are in), as torchrun's last_call_timeout; the nodes that join in it are in the job from its start, " +
	"a node that comes later joins it while it runs (scale up); 0: start as soon as nodes 0..MIN-1 are in. Meaningless with -nnodes N: " +
	"the default is then ignored, and -last-call given is an error"

// lastCallFlag checks -last-call (d; given on the command line or not)
// and returns the wait the launcher gets (launch's nodes_lastcall.go):
// none unless -nnodes MIN:MAX lets the job grow. A negative wait is an
// error; so is -last-call given to the launcher of a job that does not
// grow (-nnodes N: there is no one to wait for), but not to a rank: a
// restart's ranks get -nnodes N appended to the job's arguments.
func lastCallFlag(tr *launch.Transport, d time.Duration, given bool) (time.Duration, error) {
	grows := tr.MP != nil && tr.MP.MaxNodes > tr.MP.Nnodes
	switch {
	case d < 0:
		return 0, fmt.Errorf("-last-call %v: must not be negative", d)
	case !grows && given && tr.Launcher():
		return 0, fmt.Errorf("-last-call %v applies to -nnodes MIN:MAX (MIN < MAX) only: node 0 waits it for nodes MIN..MAX-1; with -nnodes N the job starts once all N nodes are in", d)
	case !grows:
		return 0, nil
	}
	return d, nil
}
