package main

import (
	"fmt"
	"math/bits"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/internal/bytesize"
)

// autoPick is auto's pick for an all-reduce of the given bytes on n
// in-process ranks under the default model, worked out from the cost
// model's own functions: the shape of n ranks on one node that share
// memory in place, the default model for it, and the size class's lower
// bound (auto picks once per power-of-two class).
func autoPick(n, bytes int) allreduce.Algorithm {
	s := cost.FlatShape(n)
	s.PeerMemory = true
	return allreduce.Choose(cost.DefaultModelFor(s), s, 1<<(bits.Len(uint(bytes))-1))
}

// The plan names what every "auto" resolved to: the algorithm of the one
// bucket and the model it was picked by; with -algo, the algorithm asked
// for; with several buckets, the rule by size.
func TestPlanNamesTheAlgorithm(t *testing.T) {
	data := writeMNISTDir(t)
	params := 784*16 + 16 + 16*10 + 10
	out, err := runTrain(t, "-data", data, "-ranks", "4", "-batch", "40", "-max-steps", "1", "-hidden", "16")
	require.NoError(t, err)
	require.Contains(t, out, fmt.Sprintf("all-reduce algorithm auto, by the default model for in-process ranks: %s for the one bucket (%s)\n",
		autoPick(4, params*4), humanBytes(int64(params*4))))

	out, err = runTrain(t, "-data", data, "-ranks", "4", "-batch", "40", "-max-steps", "1", "-hidden", "16", "-algo", "tree")
	require.NoError(t, err)
	require.Contains(t, out, "all-reduce algorithm -algo tree: tree for the one bucket")

	// 784×600 weights (1.79 MiB) fill a bucket of their own after the
	// first 1 MiB one: the rule covers 8 B to every parameter's bytes.
	out, err = runTrain(t, "-data", data, "-ranks", "4", "-batch", "40", "-max-steps", "1", "-hidden", "600", "-bucket-mb", "1")
	require.NoError(t, err)
	total := (784*600 + 600 + 600*10 + 10) * 4
	rule := ""
	cur := autoPick(4, 8)
	for b := 16; b < total; b *= 2 {
		if a := autoPick(4, b); a != cur {
			rule += fmt.Sprintf("%s below %s, ", cur, bytesize.Format(b))
			cur = a
		}
	}
	rule += fmt.Sprintf("%s up to %s\n", cur, humanBytes(int64(total)))
	require.Contains(t, out, "all-reduce algorithm auto, by the default model for in-process ranks: 2 buckets, by size: "+rule)
}

// -transport auto says what it chose: shm for ranks on this host.
func TestPlanNamesTheTransportAutoChose(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shm: Linux only")
	}
	data := writeMNISTDir(t)
	out, err := runTrain(t, "-transport", "auto", "-data", data, "-ranks", "2", "-batch", "20", "-max-steps", "1", "-hidden", "8")
	require.NoError(t, err, out)
	require.Contains(t, out, "with DDP on 2 shm ranks (-transport auto: every rank on this host), ")
	require.Contains(t, out, "all-reduce algorithm auto, by the default model for shared-memory ranks (shm): ")
	require.NotContains(t, out, "auto ranks")
}
