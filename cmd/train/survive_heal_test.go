package main

import (
	"bufio"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// healedOutput are a -json job's heal records.
func healedOutput(t *testing.T, out string) []healRecord {
	t.Helper()
	var hs []healRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		if m["healed"] != nil {
			var h healRecord
			require.NoError(t, json.Unmarshal(sc.Bytes(), &h))
			hs = append(hs, h)
		}
	}
	return hs
}

// A rank killed with SIGKILL after step 7, with -heal: the other three go
// on as generation 1, the launcher starts rank 4 to replace it, and once it
// is ready the group grows back to 4 at a step boundary; rank 4 is healed
// from the three (each sends about a third of the state), the replicas are
// checked bitwise, and the job ends on 4 ranks with every example used once
// per epoch and no step lost. (A real tcp job: skipped under -short.)
func TestSurviveHeal(t *testing.T) {
	if testing.Short() {
		t.Skip("a tcp job of several seconds")
	}
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	t.Setenv(faultsVar, "kill:2:7:0")
	out, err := runTrain(t, survivorArgs(data, ck, "-heal")...)
	require.NoError(t, err, out)
	epochs, restarts, survived := survivedOutput(t, out)
	require.Len(t, epochs, 2, out)
	require.Empty(t, restarts, out)
	require.Len(t, survived, 1, out)
	require.Equal(t, int64(0), survived[0].StepsLost)
	requireEachSampleOnce(t, epochs, 24)
	hs := healedOutput(t, out)
	require.Len(t, hs, 1, out)
	h := hs[0]
	require.Equal(t, 2, h.Healed)
	require.Len(t, h.Joined, 1)
	require.Equal(t, 3, h.Joined[0].Rank)
	require.Equal(t, 4, h.Joined[0].Name)
	require.Contains(t, h.Joined[0].Why, "replaces rank 2")
	require.Len(t, h.SentBytes, 4)
	require.Zero(t, h.SentBytes[3])
	for r := range 3 {
		require.Greater(t, h.SentBytes[r], h.StateBytes/4, "rank %d sends about a third", r)
		require.Less(t, h.SentBytes[r], h.StateBytes/2, "rank %d sends about a third", r)
	}
	require.Equal(t, 4.0, epochs[1]["ranks"], out)
	require.Equal(t, 32.0, epochs[1]["global_step"])
}
