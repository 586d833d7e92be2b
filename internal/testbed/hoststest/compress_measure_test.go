package hoststest

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ringddp/ringddp/internal/testbed"
)

// TestMeasureCompressionOnSlowLink is a measurement, not a check, and
// runs only with RINGDDP_MEASURE_COMPRESSION=1 (docs/compression.md): the
// MLP on real MNIST, 2 hosts × 2 ranks, links shaped to 100 Mbit/s, each
// -compress choice for 100 steps, the choices in turn twice (the rates
// of a loaded machine drift); it logs the step rate between the progress
// lines of steps 23 and 92 (after start-up and the first buckets' set-up)
// and its ratio to the uncompressed run's of the same round.
func TestMeasureCompressionOnSlowLink(t *testing.T) {
	if os.Getenv("RINGDDP_MEASURE_COMPRESSION") != "1" {
		t.Skip("a measurement: set RINGDDP_MEASURE_COMPRESSION=1")
	}
	progress := regexp.MustCompile(`step (\d+)/\d+\s+loss \S+\s+([0-9.]+)s`)
	var base float64
	for round := range 2 {
		for _, c := range []string{"none", "bf16", "fp16", "powersgd:4:0", "auto"} {
			bed := newBed(t, testbed.Config{Hosts: 2, Rate: "100mbit"})
			nodes := startJob(t, bed, trainBin, "-transport", "auto", "-ranks", "2", "-epochs", "1", "-max-steps", "100", "-out", "", "-compress", c)
			waitJob(t, nodes, 10*time.Minute)
			requireSuccess(t, nodes)
			at := map[int]float64{}
			for _, m := range progress.FindAllStringSubmatch(nodes[0].stdout.String(), -1) {
				s, _ := strconv.Atoi(m[1])
				at[s], _ = strconv.ParseFloat(m[2], 64)
			}
			if _, ok := at[92]; !ok {
				t.Fatalf("-compress %s: no progress line at step 92\n%s", c, output(nodes))
			}
			rate := 69 / (at[92] - at[23])
			if c == "none" {
				base = rate
			}
			t.Logf("round %d: -compress %-13s %6.1f steps/s  %.2f× uncompressed", round+1, c, rate, rate/base)
		}
	}
}
