package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ringddp/ringddp/internal/outfile"
	"github.com/ringddp/ringddp/internal/plotpng"
	"github.com/ringddp/ringddp/internal/run/trainer"
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

// printEpoch writes an epoch's line: losses, accuracy, throughput, the
// step-time breakdown (comm wait is the communication the backward pass
// did not hide), all communication and the share of it that overlapped,
// optimizer state and bytes sent, and the slowest rank (the one most
// often last to hand in its gradients). A partial epoch (a -max-steps stop inside
// it) says how far it got.
func printEpoch(w io.Writer, m trainer.EpochMetrics, epochs int) {
	head := fmt.Sprintf("epoch %d/%d", m.Epoch, epochs)
	if m.Partial {
		head += fmt.Sprintf(" (partial: step %d/%d)", m.StepInEpoch, m.StepsPerEpoch)
	}
	fmt.Fprintf(w, "%s  train_loss %.4f  test_acc %.2f%%  test_loss %.4f  %.0f samples/s  %.1fs (eval %.1fs)  step time: compute %.1fs, comm wait %.2fs (%.1f%%), optimizer %.2fs  comm %.2fs (%.0f%% overlapped)  opt state %s/rank, %s sent/step",
		head, m.TrainLoss, 100*m.TestAccuracy, m.TestLoss, m.SamplesPerSec, m.EpochSeconds, m.EvalSeconds,
		m.ComputeSeconds, m.CommWaitSeconds, 100*m.CommWaitFraction(), m.OptimizerSeconds,
		m.CommSeconds, 100*m.CommOverlap(),
		humanBytes(m.OptStateBytesPerRank), humanBytes(m.CommBytesPerStep))
	if m.Ranks > 1 && m.SlowestRank >= 0 {
		fmt.Fprintf(w, "  slowest rank %d: last in %.0f%% of steps, median %.1f ms behind",
			m.SlowestRank, 100*m.SlowestRankShare, m.SlowestRankLagMs)
	}
	fmt.Fprintln(w)
}

// writeOutputs (re)writes metrics.csv and the plots for the epochs and
// steps so far, each atomically.
func writeOutputs(dir string, epochs []trainer.EpochMetrics, losses []stepLoss) error {
	if err := outfile.Write(filepath.Join(dir, metricsFile), outfile.Shared, func(w io.Writer) error {
		return writeCSV(w, epochs)
	}); err != nil {
		return err
	}
	if err := outfile.Write(filepath.Join(dir, plotFile), outfile.Shared, func(w io.Writer) error {
		return writePlot(w, epochs, losses)
	}); err != nil {
		return err
	}
	return outfile.Write(filepath.Join(dir, breakdownFile), outfile.Shared, func(w io.Writer) error {
		return writeBreakdown(w, epochs)
	})
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

// epochX is where an epoch's figures sit on the plots' epoch axis: at its
// number for a full epoch, at the fraction reached for a partial one.
func epochX(m trainer.EpochMetrics) float64 {
	if !m.Partial || m.StepsPerEpoch <= 0 {
		return float64(m.Epoch)
	}
	return float64(m.Epoch-1) + float64(m.StepInEpoch)/float64(m.StepsPerEpoch)
}

// writePlot draws two panels as a PNG: the losses (the training loss of
// every step, faint, and smoothed; the test loss per epoch) and the test
// accuracy per epoch. Without step losses the training loss is drawn per
// epoch.
func writePlot(w io.Writer, epochs []trainer.EpochMetrics, losses []stepLoss) error {
	train := make(plotter.XYs, len(epochs))
	test := make(plotter.XYs, len(epochs))
	acc := make(plotter.XYs, len(epochs))
	for i, m := range epochs {
		x := epochX(m)
		train[i] = plotter.XY{X: x, Y: m.TrainLoss}
		test[i] = plotter.XY{X: x, Y: m.TestLoss}
		acc[i] = plotter.XY{X: x, Y: 100 * m.TestAccuracy}
	}
	blue := color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange := color.RGBA{R: 255, G: 127, B: 14, A: 255}
	green := color.RGBA{R: 44, G: 160, B: 44, A: 255}

	lossPlot := plot.New()
	lossPlot.Title.Text = "Loss"
	lossPlot.X.Label.Text = "epoch"
	lossPlot.Y.Label.Text = "cross-entropy"
	lossPlot.Y.Min = 0
	if len(losses) > 0 {
		if err := addStepLosses(lossPlot, losses, blue); err != nil {
			return err
		}
	} else if err := addLine(lossPlot, "train loss", train, blue); err != nil {
		return err
	}
	if err := addLine(lossPlot, "test loss", test, orange); err != nil {
		return err
	}
	lossPlot.Legend.Top = true

	accPlot := plot.New()
	accPlot.Title.Text = "Test accuracy"
	accPlot.X.Label.Text = "epoch"
	accPlot.Y.Label.Text = "accuracy (%)"
	if err := addLine(accPlot, "test accuracy", acc, green); err != nil {
		return err
	}
	accPlot.Legend.Top = true
	accPlot.Legend.Left = true
	for _, p := range []*plot.Plot{lossPlot, accPlot} {
		p.X.Tick.Marker = epochTicks{}
		if n := len(epochs); n > 0 {
			p.X.Min, p.X.Max = epochX(epochs[0])-0.25, epochX(epochs[n-1])+0.25
		}
		if len(losses) > 0 {
			p.X.Min = min(p.X.Min, math.Floor(losses[0].x))
		}
	}

	return plotpng.WriteColumn(w, 7*vg.Inch, 7*vg.Inch, lossPlot, accPlot)
}

func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color) error {
	l, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	pts.Color = c
	pts.Shape = draw.CircleGlyph{}
	p.Add(l, pts)
	p.Legend.Add(name, l, pts)
	return nil
}

// epochTicks puts a labelled tick on every whole epoch.
type epochTicks struct{}

func (epochTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := int(lo); float64(e) <= hi; e++ {
		if float64(e) >= lo {
			ticks = append(ticks, plot.Tick{Value: float64(e), Label: strconv.Itoa(e)})
		}
	}
	return ticks
}
