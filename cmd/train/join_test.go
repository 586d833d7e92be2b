package main

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/freeport"
)

// -join-timeout bounds how long a node's launcher waits for node 0's: a
// node alone gives up after it, naming what it waited for and why.
func TestJoinTimeoutFlag(t *testing.T) {
	t.Setenv("RINGDDP_SECRET", "a join-timeout test secret, 32 bytes")
	master := "127.0.0.1:" + strconv.Itoa(freeport.Loopback(t))
	start := time.Now()
	out, err := runTrain(t, "-transport", "tcp", "-ranks", "1", "-nnodes", "2", "-node-rank", "1", "-master", master, "-join-timeout", "1s")
	require.ErrorContains(t, err, "node 1: node 0's launcher did not answer at "+master+" within 1s", out)
	require.ErrorContains(t, err, "connection refused")
	require.Less(t, time.Since(start), 10*time.Second)
}
