package zero_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
)

// BenchmarkBuddyHop is the buddy hop alone, 4 tcp ranks, one piece of
// cmd/train's MLP shard each (58,800 float32, 235 KB) sent to the ring
// neighbour: as the buddies send it with more than two ranks (one-way
// AllGatherVs in pair groups, two rounds: shift=false) and as one
// allreduce.Shift by 1 (shift=true). docs/elastic.md compares it with the
// same hop inside a step.
func BenchmarkBuddyHop(b *testing.B) {
	const n, piece = 4, 58_800
	for _, shift := range []bool{false, true} {
		b.Run(fmt.Sprintf("shift=%v", shift), func(b *testing.B) {
			errs := allreducetest.RunRanks(benchConns(b, "tcp", n), func(g *allreduce.Group) error {
				ctx := context.Background()
				src, dst := make([]float32, piece), make([]float32, piece)
				counts := []int{piece, piece, piece, piece}
				pairs, sends, err := ringPairs(ctx, g)
				if err != nil {
					return err
				}
				one := []int{piece, 0}
				if g.Rank() == 0 {
					b.ResetTimer()
				}
				for range b.N {
					if shift {
						err = allreduce.Shift(ctx, g, dst, src, counts, 1)
					} else {
						ws := make([]*allreduce.Work, len(pairs))
						for i, p := range pairs {
							if sends[i] {
								ws[i] = allreduce.AllGatherVAsync(ctx, p, src, src, one)
							} else {
								ws[i] = allreduce.AllGatherVAsync(ctx, p, dst, dst[:0], one)
							}
						}
						err = allreduce.WaitAll(ctx, ws...)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					b.Fatalf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// ringPairs splits g (an even number of ranks) into the pair groups of
// the ring's edges r → r+1, coloured by r's parity: this rank's group of
// each round and whether it sends in it.
func ringPairs(ctx context.Context, g *allreduce.Group) ([]*allreduce.Group, []bool, error) {
	n, r := g.Size(), g.Rank()
	left := (r + n - 1) % n
	var pairs []*allreduce.Group
	var sends []bool
	for c := range 2 {
		colour, key := -1, 0
		switch c {
		case r % 2:
			colour, key = r, 0
		case left % 2:
			colour, key = left, 1
		}
		p, err := g.Split(ctx, colour, key)
		if err != nil {
			return nil, nil, err
		}
		if p != nil {
			pairs, sends = append(pairs, p), append(sends, key == 0)
		}
	}
	return pairs, sends, nil
}
