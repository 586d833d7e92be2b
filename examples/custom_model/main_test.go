package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRun runs the example: the loss must go down and the replicas agree.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	losses, err := run(ctx, &out)
	require.NoError(t, err)
	require.Len(t, losses, steps)
	first := (losses[0] + losses[1] + losses[2]) / 3
	last := (losses[steps-1] + losses[steps-2] + losses[steps-3]) / 3
	require.Less(t, last, first/2, "loss %v", losses)
	require.Contains(t, out.String(), "step  1  loss ")
	require.Contains(t, out.String(), "all replicas hold identical parameters")
	require.Equal(t, steps/reportEvery+2, strings.Count(out.String(), "\n"))
}
