package zero

import (
	"context"
	"errors"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
)

// StepGatherLost is Step with buddies on a rank whose all-gather fails
// after it has moved every bucket (a peer lost just after its last send):
// the step completes on the other ranks but not on this one. It returns
// the simulated failure.
func StepGatherLost[T ddp.Float](ctx context.Context, z *ZeRO1[T]) error {
	params := z.d.ParamArena()
	if err := z.updateShard(ctx, params); err != nil {
		return err
	}
	for b, r := range z.buckets {
		p := z.pieces[b]
		if err := allreduce.AllGather(ctx, z.group, params[r[0]:r[1]], params[p.Lo:p.Hi]); err != nil {
			return err
		}
	}
	return z.buddy.end(params, errors.New("zero: the all-gather lost a peer (simulated)"))
}
