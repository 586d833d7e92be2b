package hoststest

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/testbed"
)

// BenchEnv turns on TestBedBench, the test bed's all-reduce measurement
// (docs/testbed.md's tables): its value is the layouts, hosts×ranks,
// comma-separated ("2x2,3x2"). BenchSizesEnv, BenchAlgosEnv, BenchItersEnv
// and BenchRoundsEnv change the sizes (cmd/bench's syntax, default
// "16M,64M"), the algorithms (default "ring,hd,hierarchical,torus,mesh"),
// the timed iterations of a run (default 5) and the rounds (default 3);
// BenchBinEnv compares cmd/bench binaries, "label=path,label=path" (one
// built from an earlier commit, say), instead of running this tree's.
const (
	BenchEnv       = "RINGDDP_BED_BENCH"
	BenchSizesEnv  = "RINGDDP_BED_BENCH_SIZES"
	BenchAlgosEnv  = "RINGDDP_BED_BENCH_ALGOS"
	BenchItersEnv  = "RINGDDP_BED_BENCH_ITERS"
	BenchRoundsEnv = "RINGDDP_BED_BENCH_ROUNDS"
	BenchBinEnv    = "RINGDDP_BED_BENCH_BIN"
)

// TestBedBench measures all-reduce across hosts at 1 Gbit/s: per layout,
// size and algorithm, each binary's time and busbw and its fraction of the
// floor (floorBusBW), and the bytes the busiest host's link carried out
// per all-reduce (the host's eth0 transmit counter, frames' headers
// included, over a run of one iteration) against the fewest an
// all-reduce must move. A round runs every algorithm with every binary,
// one after the other (so that a machine whose load changes loads them
// alike); a run's time is cmd/bench's median of its iterations (slowest
// rank), and a row's the median of its rounds'. It prints markdown tables
// and asserts nothing about speed; it runs only with $RINGDDP_BED_BENCH
// set (scripts/bed-bench.sh):
//
//	RINGDDP_BED_BENCH=2x2,3x2 go test -run TestBedBench -v -timeout 60m ./internal/testbed/hoststest/
func TestBedBench(t *testing.T) {
	layouts := os.Getenv(BenchEnv)
	if layouts == "" {
		t.Skip("the test bed's measurement runs with $" + BenchEnv + "=2x2,3x2 (layouts hosts×ranks)")
	}
	sizes := strings.Split(envOr(BenchSizesEnv, "16M,64M"), ",")
	algos := strings.Split(envOr(BenchAlgosEnv, "ring,hd,hierarchical,torus,mesh"), ",")
	iters := envOr(BenchItersEnv, "5")
	rounds, err := strconv.Atoi(envOr(BenchRoundsEnv, "3"))
	require.NoError(t, err, "$%s", BenchRoundsEnv)
	var labels, bins []string
	for _, lb := range strings.Split(envOr(BenchBinEnv, "this tree="+benchBin), ",") {
		label, path, ok := strings.Cut(lb, "=")
		require.True(t, ok, "$%s: %q: want label=path", BenchBinEnv, lb)
		labels, bins = append(labels, label), append(bins, path)
	}
	for _, l := range strings.Split(layouts, ",") {
		var hosts, ranks int
		_, err := fmt.Sscanf(l, "%dx%d", &hosts, &ranks)
		require.NoError(t, err, "$%s: layout %q: want HOSTSxRANKS", BenchEnv, l)
		bed := newBed(t, testbed.Config{Hosts: hosts, Rate: "1gbit"})
		floor := floorBusBW(hosts, hosts*ranks)
		for _, size := range sizes {
			times := map[string][]float64{} // by algo and binary
			var bytes int64
			sent := map[string]int64{}
			for round := range rounds {
				for _, algo := range algos {
					for i, bin := range bins {
						if round == 0 {
							sent[algo+bins[i]] = hostBytesPerIteration(t, bed, bin, ranks, algo, size)
						}
						r := runBench(t, bed, bin, ranks, algo, size, "-iters", iters, "-warmup", "2")
						times[algo+bin] = append(times[algo+bin], r.TimeUS)
						bytes = r.Bytes
					}
				}
			}
			head := "| algo |"
			for _, label := range labels {
				head += fmt.Sprintf(" %s: time (ms) | busbw (GB/s) | of the floor | bytes out / M |", label)
			}
			lines := []string{head, strings.Repeat("|---", 1+4*len(labels)) + "|"}
			for _, algo := range algos {
				line := "| " + algo + " |"
				for _, bin := range bins {
					us := median(times[algo+bin])
					busbw := float64(bytes) / us / 1e3 * 2 * float64(hosts*ranks-1) / float64(hosts*ranks)
					line += fmt.Sprintf(" %.1f | %.4f | %.2f | %.3f |", us/1e3, busbw, busbw/floor, float64(sent[algo+bin])/float64(bytes))
				}
				lines = append(lines, line)
			}
			t.Logf("\n%d hosts × %d ranks, %s, floor %.4f GB/s busbw (%.3f·M out of each host), median of %d rounds of %s iterations\n%s",
				hosts, ranks, size, floor, 2*float64(hosts-1)/float64(hosts), rounds, iters, strings.Join(lines, "\n"))
		}
	}
}

// median is the median of xs (the mean of the middle two of an even
// count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// runBench runs cmd/bench's all-reduce of one size with one algorithm on
// every host of bed, ranks a host, with the cmd/bench binary bin, and
// returns its row (rank 0's).
func runBench(t *testing.T, bed *testbed.Bed, bin string, ranks int, algo, size string, more ...string) timedRow {
	t.Helper()
	args := append([]string{"-transport", "auto", "-ranks", strconv.Itoa(ranks), "-algo", algo,
		"-min", size, "-max", size, "-check=false", "-json", "-timeout", "60s"}, more...)
	nodes := startJob(t, bed, bin, args...)
	waitJob(t, nodes, 20*time.Minute)
	requireSuccess(t, nodes)
	rows := parseTimedRows(t, nodes[0].stdout.String())
	require.Len(t, rows, 1, "%s", output(nodes))
	return rows[0]
}

// hostBytesPerIteration is the most bytes a host's link carried out of
// it in one all-reduce of size by algo: a run of one iteration, no
// warm-up, between two readings of every host's transmit counter (the
// job's formation, a 0-byte agreement and the 8-byte gathering of the
// times add a few kilobytes).
func hostBytesPerIteration(t *testing.T, bed *testbed.Bed, bin string, ranks int, algo, size string) int64 {
	t.Helper()
	before := txBytes(t, bed)
	runBench(t, bed, bin, ranks, algo, size, "-iters", "1", "-warmup", "0")
	after := txBytes(t, bed)
	var most int64
	for i := range after {
		most = max(most, after[i]-before[i])
	}
	return most
}

// floorBusBW is the busbw, in GB/s, of an all-reduce among n ranks on k
// hosts whose links carry 1 Gbit/s each way and nothing else limits: each
// host must send at least 2(k-1)/k·M over its link (its share of the
// reduce-scatter's and of the all-gather's data), taking 2(k-1)/k·M/0.125
// GB/s, and busbw is M/t·2(n-1)/n.
func floorBusBW(k, n int) float64 {
	algbw := 0.125 / (2 * float64(k-1) / float64(k))
	return algbw * 2 * float64(n-1) / float64(n)
}

// txBytes is each host's eth0 transmit byte counter.
func txBytes(t *testing.T, bed *testbed.Bed) []int64 {
	t.Helper()
	var out []int64
	for _, h := range bed.Hosts() {
		n, err := h.TxBytes()
		require.NoError(t, err)
		out = append(out, n)
	}
	return out
}

// timedRow is the part of a cmd/bench -json row the measurement reads.
type timedRow struct {
	Bytes  int64   `json:"bytes"`
	TimeUS float64 `json:"time_us"`
}

func parseTimedRows(t *testing.T, out string) []timedRow {
	t.Helper()
	var rows []timedRow
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r timedRow
		require.NoError(t, json.Unmarshal([]byte(line), &r), "line %q", line)
		rows = append(rows, r)
	}
	return rows
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
