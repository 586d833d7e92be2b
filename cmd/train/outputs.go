package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"reflect"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/ringddp/ringddp/internal/outfile"
	"github.com/ringddp/ringddp/internal/run/trainer"
	"github.com/ringddp/ringddp/internal/trace"
)

// The files -out writes.
const (
	metricsFile   = "metrics.csv"
	plotFile      = "loss_accuracy.png"
	breakdownFile = "step_time.png"
)

// stepLoss is one step's training loss (averaged over ranks) at x, the
// epochs done (fractional).
type stepLoss struct{ x, loss float64 }

// printEpoch writes an epoch's lines. The first is the headline, as
// PyTorch's examples print it: the losses, the test accuracy, the
// throughput and the epoch's time (and its evaluation's). The second,
// indented, is the step-time breakdown in milliseconds per step, averaged
// over ranks (trainer.EpochMetrics defines each): compute + comm wait +
// optimizer, which is the step but for filling the batch; then all
// communication, comm = hidden + comm wait, and the share of it the
// backward pass hid; then the bytes each rank sends per step and its
// optimizer state. A third names the slowest rank, only when the trainer
// found it last significantly more often than chance. A partial epoch (a
// -max-steps stop inside it) says how far it got.
func printEpoch(w io.Writer, m trainer.EpochMetrics, epochs int) {
	head := fmt.Sprintf("epoch %d/%d", m.Epoch, epochs)
	if m.Partial {
		head += fmt.Sprintf(" (partial: step %d/%d)", m.StepInEpoch, m.StepsPerEpoch)
	}
	fmt.Fprintf(w, "%s  train_loss %.4f  test_loss %.4f  test_acc %.2f%%  %s samples/s  %.1fs (eval %.1fs)\n",
		head, m.TrainLoss, m.TestLoss, 100*m.TestAccuracy, thousands(m.SamplesPerSec), m.EpochSeconds, m.EvalSeconds)
	b := stepBreakdown(m)
	fmt.Fprintf(w, "  per step: compute %.1f ms + comm wait %.1f ms + optimizer %.1f ms | comm %.1f ms, %.0f%% overlapped | %s sent, %s opt state per rank\n",
		b.compute, b.wait, b.optimizer, b.comm, 100*m.CommOverlap(),
		humanBytes(m.CommBytesPerStep), humanBytes(m.OptStateBytesPerRank))
	if m.Ranks > 1 && m.SlowestRank >= 0 {
		fmt.Fprintf(w, "  slowest rank %d: last in %.0f%% of steps, median %.1f ms behind (chance: %.0f%%)\n",
			m.SlowestRank, 100*m.SlowestRankShare, m.SlowestRankLagMs, 100/float64(m.Ranks))
	}
}

// breakdown is an epoch's step time in milliseconds per step: compute
// (forward and backward), comm wait (the exposed communication), the
// optimizer, and all communication (hidden + comm wait).
type breakdown struct{ compute, wait, optimizer, comm float64 }

// stepBreakdown is m's breakdown per step (zero without steps).
func stepBreakdown(m trainer.EpochMetrics) breakdown {
	if m.Steps <= 0 {
		return breakdown{}
	}
	per := 1e3 / float64(m.Steps)
	return breakdown{compute: m.ComputeSeconds * per, wait: m.CommWaitSeconds * per,
		optimizer: m.OptimizerSeconds * per, comm: m.CommSeconds * per}
}

// thousands renders x rounded to an integer with commas between groups of
// three digits: 12,345.
func thousands(x float64) string {
	s := strconv.FormatFloat(math.Round(math.Abs(x)), 'f', 0, 64)
	var b strings.Builder
	if x <= -0.5 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// writeOutputs (re)writes metrics.csv and the plots, titled with the run,
// for the epochs and steps so far, each atomically, one file per call of
// writeOutputFile.
func writeOutputs(dir, title string, epochs []trainer.EpochMetrics, losses []stepLoss) error {
	if err := writeOutputFile(filepath.Join(dir, metricsFile), func(w io.Writer) error {
		return writeCSV(w, epochs)
	}); err != nil {
		return err
	}
	if err := writeOutputFile(filepath.Join(dir, plotFile), func(w io.Writer) error {
		return writePlot(w, title, epochs, losses)
	}); err != nil {
		return err
	}
	return writeOutputFile(filepath.Join(dir, breakdownFile), func(w io.Writer) error {
		return writeBreakdown(w, title, epochs)
	})
}

// writeOutputFile writes one -out file atomically.
func writeOutputFile(path string, write func(io.Writer) error) error {
	return outfile.Write(path, outfile.Shared, write)
}

// runTitle names a run on its plots: the model and element type, the
// ranks and transport, DDP or ZeRO-1, and when it started (local time and
// zone, to the second: the run's id, which also names its directory under
// runs/).
func runTitle(p trainer.Plan, transport string, zero1 bool, start time.Time) string {
	mode := "DDP"
	if zero1 {
		mode = "ZeRO-1"
	}
	return fmt.Sprintf("%s %s, %d ranks over %s, %s, run of %s", p.Model, p.DType, p.Ranks, transport, mode,
		start.Format("2006-01-02 15:04:05 MST"))
}

// csvColumns are EpochMetrics' JSON keys, in field order.
func csvColumns() []string {
	t := reflect.TypeOf(trainer.EpochMetrics{})
	cols := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		cols = append(cols, strings.Split(t.Field(i).Tag.Get("json"), ",")[0])
	}
	return cols
}

// writeCSV writes one row per epoch with the columns of the JSON output,
// each value as JSON writes it (numbers, true/false).
func writeCSV(w io.Writer, epochs []trainer.EpochMetrics) error {
	cw := csv.NewWriter(w)
	cols := csvColumns()
	if err := cw.Write(cols); err != nil {
		return err
	}
	for _, m := range epochs {
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		var row map[string]json.RawMessage
		if err := json.Unmarshal(b, &row); err != nil {
			return err
		}
		rec := make([]string, len(cols))
		for i, c := range cols {
			rec[i] = string(row[c])
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// cpuProfileFile is where this process writes -cpuprofile: the path, or in
// a tcp job, whose ranks are processes each, rank r's path.rank<r>
// (trace.RankFile), as cmd/bench names them.
func cpuProfileFile(o *options) string {
	if o.tr != nil && o.tr.MP != nil && !o.tr.Launcher() {
		return trace.RankFile(o.cpuProfile, o.tr.MP.Env.Rank)
	}
	return o.cpuProfile
}

// startCPUProfile starts -cpuprofile, if given, into a new file beside
// cpuProfileFile (outfile.Create: a symbolic link there is replaced, never
// followed); stop ends the profile and renames the file into place.
func startCPUProfile(o *options) (stop func() error, err error) {
	if o.cpuProfile == "" {
		return func() error { return nil }, nil
	}
	f, err := outfile.Create(cpuProfileFile(o), outfile.Shared)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Abort()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Commit(); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		return nil
	}, nil
}

// printWritten says, once, where the run wrote its outputs besides the
// checkpoint: -out's files (if any epoch wrote them: outFiles),
// -cpuprofile's and -trace's.
func printWritten(w io.Writer, o *options, outFiles bool) {
	if o.out != "" && outFiles {
		fmt.Fprintf(w, "metrics: %s, plots: %s, %s\n", filepath.Join(o.out, metricsFile), filepath.Join(o.out, plotFile), filepath.Join(o.out, breakdownFile))
	}
	if o.cpuProfile != "" {
		where := cpuProfileFile(o)
		if where != o.cpuProfile {
			where = trace.RankFile(o.cpuProfile, 0) + " (rank r: " + o.cpuProfile + ".rank<r>)"
		}
		fmt.Fprintf(w, "cpu profile: %s (go tool pprof)\n", where)
	}
	if o.cfg.Trace != "" {
		fmt.Fprintf(w, "trace: %s (open in ui.perfetto.dev or chrome://tracing)\n", o.cfg.Trace)
	}
}
