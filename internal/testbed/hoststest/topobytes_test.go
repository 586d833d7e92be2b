package hoststest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/testbed"
)

// The bytes each host sends to the others in one all-reduce (its link's
// transmit counter: payload, the tcp transport's framing and the frames'
// headers) are those of each algorithm's formula, in units of the buffer
// M, on 3 hosts of 2 ranks (an odd number of hosts; chunks that do not
// split evenly) with -transport auto (shm within hosts):
//
//   - ring: 2(N-1)/N from the one rank of each host whose right
//     neighbour is on the next host;
//   - hierarchical and torus: 2(K-1)/K, the fewest an all-reduce can
//     (from the local root; split among the host's ranks);
//   - mesh: L·2(K-1)/K, an all-reduce of the whole buffer per local rank.
//
// The headers, the acknowledgements of what the host receives and the
// job's own messages (formation, the bench's agreement) add under 2% of a
// 32 MiB buffer (allreduce's TestTopologyAlgorithmsInterNodeBytes counts
// the payload exactly, in process); with 8 MiB the fixed part once
// reached 2.9%. The links are not shaped: this is about
// bytes, not time.
func TestTopologyBytesAcrossHosts(t *testing.T) {
	const size = 32 << 20
	for _, hosts := range []int{3} {
		t.Run(fmt.Sprintf("%dx2", hosts), func(t *testing.T) {
			bed := newBed(t, testbed.Config{Hosts: hosts})
			k, n := float64(hosts), float64(2*hosts)
			want := map[string]float64{
				"ring":         2 * (n - 1) / n,
				"hierarchical": 2 * (k - 1) / k,
				"torus":        2 * (k - 1) / k,
				"mesh":         2 * 2 * (k - 1) / k,
			}
			for _, algo := range []string{"ring", "hierarchical", "torus", "mesh"} {
				before := txBytes(t, bed)
				runBench(t, bed, benchBin, 2, algo, fmt.Sprint(size), "-iters", "1", "-warmup", "0")
				after := txBytes(t, bed)
				for h := range after {
					got := float64(after[h]-before[h]) / size
					require.GreaterOrEqual(t, got, want[algo], "-algo %s: host %d sent %.4f·M", algo, h, got)
					require.Less(t, got, want[algo]+0.02, "-algo %s: host %d sent %.4f·M", algo, h, got)
				}
			}
		})
	}
}
