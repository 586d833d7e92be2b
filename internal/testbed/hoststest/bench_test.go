package hoststest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/testbed"
)

// benchRow is the part of a cmd/bench -json row these tests read.
type benchRow struct {
	Algo  string `json:"algo"`
	Bytes int64  `json:"bytes"`
	Wrong *int64 `json:"wrong"`
	Ranks int    `json:"ranks"`
}

// Every all-reduce algorithm, across hosts, on layouts of several
// shapes (3 hosts × 2 ranks: shm within hosts, tcp between, an odd number
// of hosts; 2 hosts × 3 ranks: an odd number of ranks per host; 2 hosts
// × 1 rank: tcp only), gives cmd/bench's sequential reference's result
// (-check) at sizes that split unevenly among the ranks. (The launchers
// run the same -ranks on every host: hosts of different rank counts are
// not a layout they can form.)
func TestTopologyAlgorithmsAcrossHosts(t *testing.T) {
	algos := []string{"auto", "ring", "doubling", "tree", "hd", "hierarchical", "torus", "mesh"}
	sizes := []int64{1000, 17000, 289000}
	for _, layout := range []struct{ hosts, ranks int }{{3, 2}, {2, 3}, {2, 1}} {
		t.Run(fmt.Sprintf("%dx%d", layout.hosts, layout.ranks), func(t *testing.T) {
			bed := newBed(t, testbed.Config{Hosts: layout.hosts, Rate: "1gbit"})
			nodes := startJob(t, bed, benchBin, "-transport", "auto", "-ranks", fmt.Sprint(layout.ranks), "-algo", "all",
				"-min", "1000", "-max", "300K", "-factor", "17", "-iters", "2", "-warmup", "1", "-check", "-json", "-timeout", "20s")
			waitJob(t, nodes, 2*time.Minute)
			requireSuccess(t, nodes)
			seen := map[string][]int64{}
			for _, r := range parseRows(t, nodes[0].stdout.String()) {
				require.Equal(t, layout.hosts*layout.ranks, r.Ranks)
				require.NotNil(t, r.Wrong, "%s at %d B: not checked", r.Algo, r.Bytes)
				require.Zero(t, *r.Wrong, "%s at %d B: elements differing from the reference", r.Algo, r.Bytes)
				seen[r.Algo] = append(seen[r.Algo], r.Bytes)
			}
			for _, a := range algos {
				require.Equal(t, sizes, seen[a], "-algo %s's rows\n%s", a, output(nodes))
			}
		})
	}
}

// parseRows parses cmd/bench's -json rows.
func parseRows(t *testing.T, out string) []benchRow {
	t.Helper()
	var rows []benchRow
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r benchRow
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "line %q", sc.Text())
		rows = append(rows, r)
	}
	return rows
}
