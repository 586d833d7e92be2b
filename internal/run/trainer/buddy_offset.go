package trainer

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/zero"
)

// buddyOffset is the buddy offset g's ranks wrap ZeRO-1 with: 1 on one
// host; across node launchers (Config.BuddyNodes), zero.MembersOffset of
// the generation's members, their job-wide names (Survivor's Name, else
// the rank) all-gathered over g, so that every rank, and the launcher
// judging a failure from the same members, computes the same offset. A
// collective over g when BuddyNodes is set.
func buddyOffset(ctx context.Context, cfg Config, g *allreduce.Group) (int, error) {
	nodes := cfg.BuddyNodes
	if nodes.Nodes < 2 || nodes.Ranks < 2 {
		return 1, nil
	}
	name := int64(g.Rank())
	if nm, ok := cfg.Survive.(named); ok {
		name = int64(nm.Name())
	}
	all := make([]int64, g.Size())
	if err := allreduce.AllGather(ctx, g, all, []int64{name}); err != nil {
		return 0, fmt.Errorf("trainer: agreeing on the ZeRO-1 buddies' placement: %w", err)
	}
	members := make([]int, len(all))
	for i, m := range all {
		members[i] = int(m)
	}
	return membersOffset(cfg, members), nil
}

// membersOffset is zero.MembersOffset of a generation's members under
// cfg: 1 on one host.
func membersOffset(cfg Config, members []int) int {
	nodes := cfg.BuddyNodes
	if nodes.Nodes < 2 || nodes.Ranks < 2 {
		return 1
	}
	return zero.MembersOffset(members, nodes.Ranks, nodes.Nodes*nodes.Ranks)
}
