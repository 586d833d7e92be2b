package main

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRun runs the example: the loss goes down, the hook saw every step,
// and the norms it recorded are those of the averaged gradients the
// wrapper holds after the last step.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := run(ctx, &out)
	require.NoError(t, err)
	first := (res.losses[0] + res.losses[1] + res.losses[2]) / 3
	last := (res.losses[steps-1] + res.losses[steps-2] + res.losses[steps-3]) / 3
	require.Less(t, last, first/2, "loss %v", res.losses)
	require.Equal(t, steps, res.hook.steps)
	d := res.ddp
	require.Len(t, res.hook.norms, len(d.Params()))
	for i := range d.Params() {
		lo, hi := d.Offset(i)
		var ss float64
		for _, v := range d.GradArena()[lo:hi] {
			ss += float64(v) * float64(v)
		}
		require.InDelta(t, math.Sqrt(ss), res.hook.norms[i], 1e-9, "parameter %d", i)
	}
	require.Contains(t, out.String(), "all replicas hold identical parameters")
	require.Equal(t, steps/reportEvery+2, strings.Count(out.String(), "\n"))
}
