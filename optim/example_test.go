package optim_test

import (
	"fmt"

	"github.com/ringddp/ringddp/optim"
)

// ZeRO-1 style: each of 2 ranks steps only its shard of a flat arena; the
// shard states are consolidated into one checkpoint and re-cut for 3 ranks.
func Example_shards() {
	params := []float64{1, 2, 3, 4, 5}
	grads := []float64{0.5, -0.5, 0.25, -0.25, 1}
	cuts := []int{0, 3, 5} // rank r owns [cuts[r], cuts[r+1])
	var states []optim.State
	for r := 0; r < 2; r++ {
		o, err := optim.NewAdamW[float64](optim.DefaultAdamWConfig())
		if err != nil {
			panic(err)
		}
		lo, hi := cuts[r], cuts[r+1]
		if err := o.Step(params[lo:hi], grads[lo:hi]); err != nil {
			panic(err)
		}
		states = append(states, o.State())
	}
	ckpt, err := optim.ConcatStates(states)
	if err != nil {
		panic(err)
	}
	fmt.Println(ckpt.Optimizer, ckpt.Step, ckpt.Len, len(ckpt.Buffer("exp_avg")))

	// Resume on rank 1 of 3, owning [2,4).
	shard, err := optim.SliceState(ckpt, 2, 4)
	if err != nil {
		panic(err)
	}
	o, err := optim.NewFromState[float64](shard)
	if err != nil {
		panic(err)
	}
	fmt.Println(o.Name(), o.Steps(), o.StateBytes())
	// Output:
	// adamw 1 5 5
	// adamw 1 32
}
