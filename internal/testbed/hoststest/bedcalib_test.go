package hoststest

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/testbed"
)

// CalibEnv turns on TestBedCalib, the cost model's check on the test bed
// (docs/testbed.md, "The cost model on the bed"): its value is the
// layouts, hosts×ranks, comma-separated ("2x2,3x2"). CalibAlgosEnv
// changes the algorithms measured (default
// "auto,ring,doubling,tree,hd,hierarchical,torus": auto and every one it
// picks from on these layouts but mesh, which sends twice the floor's
// bytes there), CalibItersEnv the timed iterations of a measurement
// of 4–64 MiB (default 3; calibSweeps), CalibRoundsEnv its rounds
// (default 2) and CalibSmallRoundsEnv the rounds of 64 KiB–1 MiB
// (default 5): each round starts one further along the list of
// algorithms.
const (
	CalibEnv            = "RINGDDP_BED_CALIB"
	CalibAlgosEnv       = "RINGDDP_BED_CALIB_ALGOS"
	CalibItersEnv       = "RINGDDP_BED_CALIB_ITERS"
	CalibRoundsEnv      = "RINGDDP_BED_CALIB_ROUNDS"
	CalibSmallRoundsEnv = "RINGDDP_BED_CALIB_SMALL_ROUNDS"
	CalibBurstEnv       = "RINGDDP_BED_CALIB_BURST" // the links' token bucket as a time (testbed.Config.Burst; default 5ms)
)

// The calibration's command line, kept short (calibArgs): the links'
// rings from 8 B to 16 MiB (a 16 MiB step over the 1 Gbit/s link takes
// 0.13 s; 64 MiB would add about 5 s a ring and round for no new regime),
// 3 timed rounds after 1 warm-up; the algorithms' sweep, which the model
// written across hosts does not use (the links as timed are the model:
// cmd/bench/calibrate.go's refitModel), the ring alone at 64 KiB, so its
// 5 rounds, and broadcast's and reduce's, take a second.
var calibArgs = []string{"-calib-max", "16M", "-algo", "ring", "-min", "64K", "-max", "64K", "-iters", "3", "-warmup", "1", "-timeout", "120s"}

// calibSweep is one sweep of the measurement: its cmd/bench flags, how
// many rounds it runs, and how a cell's rounds make its time.
type calibSweep struct {
	args   []string
	rounds int
	median bool // the median of the rounds; else the fastest
}

// calibSweeps are the measurement's two sweeps:
//
//   - 64 KiB to 1 MiB, 5 warm-up iterations and ten times the timed ones
//     (cheap; below 1 MiB one cell of a few iterations swings 1.5-2x from
//     run to run, and the first calls of a world's connections are slow),
//     back to back (-back-to-back: the bed's token bucket refills while a
//     barrier idles the link, so a small all-reduce timed after a barrier
//     of its own runs partly at the wire's speed, by as much as that
//     barrier took; back to back it runs at the link's rate, as the
//     calibration's rings time the link), in smallRounds rounds, each
//     cell the median of its rounds: here load can make a cell faster as
//     well as slower (a rank descheduled for milliseconds idles the link,
//     the bucket refills, and the iterations after it run at the wire's
//     speed), so the fastest round is not the nearest to the bed alone;
//   - 4 MiB to 64 MiB, 1 warm-up iteration and iters timed ones (a 64 MiB
//     all-reduce takes 0.6-1.3 s over the 1 Gbit/s link, beside which a
//     barrier's refill is nothing), in rounds rounds, each cell the
//     fastest of its rounds (on a loaded host another job only ever slows
//     a run of these down).
func calibSweeps(iters string, rounds, smallRounds int) []calibSweep {
	n, err := strconv.Atoi(iters)
	if err != nil || n < 1 {
		n = 3
	}
	return []calibSweep{
		{[]string{"-min", "64K", "-max", "1M", "-iters", strconv.Itoa(10 * n), "-warmup", "5", "-back-to-back"}, smallRounds, true},
		{[]string{"-min", "4M", "-max", "64M", "-iters", strconv.Itoa(n), "-warmup", "1"}, rounds, false},
	}
}

func (s calibSweep) String() string {
	how := "fastest"
	if s.median {
		how = "median"
	}
	return fmt.Sprintf("[%s] × %d rounds, each cell the %s of its rounds", strings.Join(s.args, " "), s.rounds, how)
}

// The goals' bounds (issue 33): predictions of ring, hd and torus within
// 25% at 1–64 MiB; Auto within 5% of the fastest measured at every size.
const (
	predictionBound = 0.25
	autoBound       = 0.05
)

// TestBedCalib calibrates the cost model on the test bed at 1 Gbit/s
// between hosts and checks it there, per layout: cmd/bench -calibrate
// across the hosts writes a profile; then every algorithm of
// $RINGDDP_BED_CALIB_ALGOS, auto among them, runs at 64 KiB ... 64 MiB (×4)
// under that profile (-profile: Auto picks by it, and each row carries the
// prediction of what ran). It prints the calibration's links and time,
// each algorithm's measured against predicted time per size (ratio, ✓
// within 25%), and Auto's time against the fastest measured per size (✓
// within 5%), with the goals' counts. It asserts that the runs succeed,
// not the goals (a loaded machine moves the times): it runs only with
// $RINGDDP_BED_CALIB set (scripts/bed-calib.sh):
//
//	RINGDDP_BED_CALIB=2x2,3x2 go test -run TestBedCalib -v -timeout 30m ./internal/testbed/hoststest/
func TestBedCalib(t *testing.T) {
	layouts := os.Getenv(CalibEnv)
	if layouts == "" {
		t.Skip("the cost model's check on the test bed runs with $" + CalibEnv + "=2x2,3x2 (layouts hosts×ranks)")
	}
	algos := strings.Split(envOr(CalibAlgosEnv, "auto,ring,doubling,tree,hd,hierarchical,torus"), ",")
	rounds, err := strconv.Atoi(envOr(CalibRoundsEnv, "2"))
	require.NoError(t, err, "$%s", CalibRoundsEnv)
	smallRounds, err := strconv.Atoi(envOr(CalibSmallRoundsEnv, "5"))
	require.NoError(t, err, "$%s", CalibSmallRoundsEnv)
	sweeps := calibSweeps(envOr(CalibItersEnv, "3"), max(rounds, 1), max(smallRounds, 1))
	burst, err := time.ParseDuration(envOr(CalibBurstEnv, "5ms"))
	require.NoError(t, err, "$%s", CalibBurstEnv)
	for _, l := range strings.Split(layouts, ",") {
		var hosts, ranks int
		_, err := fmt.Sscanf(l, "%dx%d", &hosts, &ranks)
		require.NoError(t, err, "$%s: layout %q: want HOSTSxRANKS", CalibEnv, l)
		t.Run(l, func(t *testing.T) {
			bed := newBed(t, testbed.Config{Hosts: hosts, Rate: "1gbit", Burst: burst})
			t.Logf("%d hosts × %d ranks, links shaped to 1gbit with a token bucket of %v", hosts, ranks, burst)
			profile := filepath.Join(t.TempDir(), "bed-"+l+".json")
			t0 := time.Now()
			args := append([]string{"-transport", "auto", "-ranks", strconv.Itoa(ranks), "-calibrate", profile}, calibArgs...)
			nodes := startJob(t, bed, benchBin, args...)
			waitJob(t, nodes, 10*time.Minute)
			requireSuccess(t, nodes)
			t.Logf("\n%d hosts × %d ranks: calibrated in %.0f s: %s\n%s", hosts, ranks, time.Since(t0).Seconds(),
				strings.Join(append(calibArgs[:len(calibArgs):len(calibArgs)], "-calibrate", "FILE"), " "), linkLines(nodes[0].stdout.String()))
			t1 := time.Now()
			var rows []calibRow
			var how []string
			for _, sw := range sweeps {
				rows = append(rows, measureSweep(t, bed, ranks, profile, algos, sw)...)
				how = append(how, sw.String())
			}
			t.Logf("\n%d hosts × %d ranks: measured in %.0f s (%s)\n%s\n%s",
				hosts, ranks, time.Since(t1).Seconds(), strings.Join(how, "; "), predictionTable(rows), autoTable(rows))
		})
	}
}

// measureSweep runs sw's rounds on the bed under the profile, each round
// starting one further along algos (what ran before an algorithm moves
// its time), and returns the first round's rows with each cell's time
// made of its rounds (combineCalibRows).
func measureSweep(t *testing.T, bed *testbed.Bed, ranks int, profile string, algos []string, sw calibSweep) []calibRow {
	var all [][]calibRow
	for round := range sw.rounds {
		k := round % len(algos)
		order := strings.Join(append(slices.Clone(algos[k:]), algos[:k]...), ",")
		args := append([]string{"-transport", "auto", "-ranks", strconv.Itoa(ranks), "-algo", order,
			"-profile", profile, "-check=false", "-json", "-factor", "4", "-timeout", "120s"}, sw.args...)
		nodes := startJob(t, bed, benchBin, args...)
		waitJob(t, nodes, 15*time.Minute)
		requireSuccess(t, nodes)
		all = append(all, parseCalibRows(t, nodes[0].stdout.String()))
	}
	return combineCalibRows(all, sw.median)
}

// calibRow is the part of a cmd/bench -json row with a model that the
// check reads.
type calibRow struct {
	Algo   string   `json:"algo"`
	Ran    string   `json:"ran"`
	Bytes  int      `json:"bytes"`
	TimeUS float64  `json:"time_us"`
	PredUS *float64 `json:"pred_us"`
}

func parseCalibRows(t *testing.T, out string) []calibRow {
	t.Helper()
	var rows []calibRow
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r calibRow
		require.NoError(t, json.Unmarshal([]byte(line), &r), "line %q", line)
		rows = append(rows, r)
	}
	return rows
}

// combineCalibRows is the first round's rows, each with the median of
// its rounds' times (useMedian) or the least (the rounds run the same rows,
// in another order).
func combineCalibRows(rounds [][]calibRow, useMedian bool) []calibRow {
	out := slices.Clone(rounds[0])
	for i := range out {
		var times []float64
		for _, rs := range rounds {
			if r, ok := findRow(rs, out[i].Algo, out[i].Bytes); ok {
				times = append(times, r.TimeUS)
			}
		}
		if out[i].TimeUS = slices.Min(times); useMedian {
			out[i].TimeUS = median(times)
		}
	}
	return out
}

// linkLines is the calibration report's part on the links: everything
// before the algorithms' table.
func linkLines(out string) string {
	head, _, _ := strings.Cut(out, "# ringddp bench: op allreduce")
	return strings.TrimSpace(head)
}

// calibSizes are the rows' sizes in order.
func calibSizes(rows []calibRow) []int {
	var out []int
	for _, r := range rows {
		if !slices.Contains(out, r.Bytes) {
			out = append(out, r.Bytes)
		}
	}
	slices.Sort(out)
	return out
}

// predictionTable is each algorithm's measured time against the
// prediction of what ran, per size (ms, measured/predicted, ✓ within
// predictionBound), and the goal's count: ring, hd and torus at 1–64 MiB.
func predictionTable(rows []calibRow) string {
	var algos []string
	for _, r := range rows {
		if !slices.Contains(algos, r.Algo) {
			algos = append(algos, r.Algo)
		}
	}
	head := "| size |"
	for _, a := range algos {
		head += " " + a + ": ms (pred) | ratio |"
	}
	lines := []string{head, strings.Repeat("|---", 1+2*len(algos)) + "|"}
	var in, of int
	for _, b := range calibSizes(rows) {
		line := "| " + sizeText(b) + " |"
		for _, a := range algos {
			r, ok := findRow(rows, a, b)
			if !ok || r.PredUS == nil || *r.PredUS <= 0 {
				line += " – | – |"
				continue
			}
			ratio := r.TimeUS / *r.PredUS
			mark := ""
			if math.Abs(ratio-1) <= predictionBound {
				mark = " ✓"
			}
			line += fmt.Sprintf(" %.2f (%.2f) | %.2f%s |", r.TimeUS/1e3, *r.PredUS/1e3, ratio, mark)
			if (a == "ring" || a == "hd" || a == "torus") && b >= 1<<20 && b <= 64<<20 {
				of++
				if mark != "" {
					in++
				}
			}
		}
		lines = append(lines, line)
	}
	lines = append(lines, fmt.Sprintf("predictions of ring, hd and torus at 1–64 MiB within %.0f%%: %d of %d", predictionBound*100, in, of))
	return strings.Join(lines, "\n")
}

// autoTable is Auto's time per size against the fastest measured
// algorithm's (✓ within autoBound), with what Auto ran, and the goal's
// count; and, to tell a wrong pick from a noisy cell, the time of the
// algorithm Auto ran in its own sweep against the fastest ("–" where it
// was not measured alone).
func autoTable(rows []calibRow) string {
	lines := []string{"| size | auto ran | auto ms | fastest | its ms | auto / fastest | ran alone ms | ran alone / fastest |",
		"|---|---|---|---|---|---|---|---|"}
	var in, of int
	for _, b := range calibSizes(rows) {
		auto, ok := findRow(rows, "auto", b)
		if !ok {
			continue
		}
		best := calibRow{TimeUS: math.Inf(1)}
		for _, r := range rows {
			if r.Bytes == b && r.Algo != "auto" && r.TimeUS < best.TimeUS {
				best = r
			}
		}
		if math.IsInf(best.TimeUS, 1) {
			continue
		}
		ratio := auto.TimeUS / best.TimeUS
		mark := ""
		of++
		if ratio <= 1+autoBound {
			mark = " ✓"
			in++
		}
		alone := "– | –"
		if r, ok := findRow(rows, auto.Ran, b); ok {
			alone = fmt.Sprintf("%.2f | %.3f", r.TimeUS/1e3, r.TimeUS/best.TimeUS)
		}
		lines = append(lines, fmt.Sprintf("| %s | %s | %.2f | %s | %.2f | %.3f%s | %s |", sizeText(b), auto.Ran, auto.TimeUS/1e3, best.Algo, best.TimeUS/1e3, ratio, mark, alone))
	}
	lines = append(lines, fmt.Sprintf("Auto within %.0f%% of the fastest measured: %d of %d sizes", autoBound*100, in, of))
	return strings.Join(lines, "\n")
}

func findRow(rows []calibRow, algo string, bytes int) (calibRow, bool) {
	for _, r := range rows {
		if r.Algo == algo && r.Bytes == bytes {
			return r, true
		}
	}
	return calibRow{}, false
}

// sizeText is b in KiB or MiB.
func sizeText(b int) string {
	if b >= 1<<20 && b%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("%d KiB", b>>10)
}

// The check's tables from rows (no bed): a cell is the median or the
// least of its rounds; Auto against the fastest, and the algorithm it ran
// alone against the fastest, which tells a noisy Auto cell (the same
// algorithm slower in Auto's sweep) from a wrong pick.
func TestCalibTables(t *testing.T) {
	us := func(x float64) *float64 { return &x }
	round := func(auto, hd, torus float64) []calibRow {
		return []calibRow{
			{Algo: "auto", Ran: "hd", Bytes: 64 << 10, TimeUS: auto, PredUS: us(600)},
			{Algo: "hd", Ran: "hd", Bytes: 64 << 10, TimeUS: hd, PredUS: us(600)},
			{Algo: "torus", Ran: "torus", Bytes: 64 << 10, TimeUS: torus, PredUS: us(400)},
		}
	}
	rounds := [][]calibRow{round(700, 500, 520), round(900, 480, 300), round(650, 510, 530)}
	med := combineCalibRows(rounds, true)
	least := combineCalibRows(rounds, false)
	for i, want := range []float64{700, 500, 520} {
		if med[i].TimeUS != want {
			t.Errorf("median of %s's rounds: %v, want %v", med[i].Algo, med[i].TimeUS, want)
		}
	}
	if least[2].TimeUS != 300 {
		t.Errorf("least of torus's rounds: %v, want 300", least[2].TimeUS)
	}
	table := autoTable(med)
	for _, want := range []string{"| 64 KiB | hd | 0.70 | hd | 0.50 | 1.400 | 0.50 | 1.000 |", "within 5% of the fastest measured: 0 of 1"} {
		if !strings.Contains(table, want) {
			t.Errorf("autoTable lacks %q:\n%s", want, table)
		}
	}
	if pt := predictionTable(med); !strings.Contains(pt, "| 64 KiB | 0.70 (0.60) | 1.17 ✓ | 0.50 (0.60) | 0.83 ✓ | 0.52 (0.40) | 1.30 |") {
		t.Errorf("predictionTable:\n%s", pt)
	}
}
