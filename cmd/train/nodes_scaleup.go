package main

import (
	"errors"
	"fmt"

	"github.com/ringddp/ringddp/internal/run/launch"
)

// scaleUpFlags checks -nnodes MIN:MAX (MIN < MAX: nodes may join the
// running job; launch's nodes_scaleup.go): a new node's ranks join as
// healed joiners, which needs -on-failure continue -heal, over tcp, with
// DDP, without spares (they would run on node 0 and take the new nodes'
// places).
func scaleUpFlags(tr *launch.Transport, onFailure string, heal, zero1 bool, spares int) error {
	if tr.MP == nil || tr.MP.MaxNodes <= tr.MP.Nnodes {
		return nil
	}
	n := fmt.Sprintf("-nnodes %d:%d", tr.MP.Nnodes, tr.MP.MaxNodes)
	switch {
	case tr.Name != launch.TCP:
		return errors.New(n + " (nodes joining a running job) runs over -transport tcp for now")
	case onFailure != launch.OnFailureContinue || !heal:
		return errors.New(n + " lets nodes join the running job, which needs -on-failure continue -heal (a new node's ranks heal from the others)")
	case zero1:
		return errors.New(n + " with -zero1 is not built (a ZeRO-1 group growing across node launchers); use DDP")
	case spares > 0:
		return errors.New(n + " with -spares: a spare would run on node 0 and take a new node's place; across node launchers a node's ranks come with its launcher")
	}
	return nil
}
