package trainer

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/zero"
)

// buddyOffset is the buddy offset g's ranks wrap ZeRO-1 with: 1 on one
// host; across node launchers (Config.BuddyNodes), zero.NodesOffset of
// the generation's ranks' nodes (BuddyNodes.Node, all-gathered over g),
// so that every rank, and the launcher judging a failure from the same
// members' nodes (its plan's), computes the same offset. A collective
// over g when BuddyNodes is set.
func buddyOffset(ctx context.Context, cfg Config, g *allreduce.Group) (int, error) {
	nodes := cfg.BuddyNodes
	if nodes.Nodes < 2 || nodes.Ranks < 2 {
		return 1, nil
	}
	all := make([]int64, g.Size())
	if err := allreduce.AllGather(ctx, g, all, []int64{int64(nodes.Node)}); err != nil {
		return 0, fmt.Errorf("trainer: agreeing on the ZeRO-1 buddies' placement: %w", err)
	}
	of := make([]int, len(all))
	for i, k := range all {
		of[i] = int(k)
	}
	return zero.NodesOffset(of), nil
}
