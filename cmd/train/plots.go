package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ringddp/ringddp/internal/plotpng"
	"github.com/ringddp/ringddp/internal/run/trainer"
)

// The plots' sizes, and the widest a bar of step_time.png is.
const (
	lossPlotWidth, lossPlotHeight           = 7 * vg.Inch, 7 * vg.Inch
	breakdownPlotWidth, breakdownPlotHeight = 8 * vg.Inch, 4.5 * vg.Inch
	maxBarWidth                             = vg.Length(28)
)

// The colours (matplotlib's tab10).
var (
	blue   = color.RGBA{R: 31, G: 119, B: 180, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	green  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	red    = color.RGBA{R: 214, G: 39, B: 40, A: 255}
)

// smoothing is the weight of the past in the step losses' exponential
// moving average (TensorBoard's smoothing, bias-corrected at the start).
const smoothing = 0.9

// smooth is the bias-corrected exponential moving average of the losses.
func smooth(losses []stepLoss) plotter.XYs {
	out := make(plotter.XYs, len(losses))
	avg, weight := 0.0, 0.0
	for i, l := range losses {
		avg = smoothing*avg + (1-smoothing)*l.loss
		weight = smoothing*weight + (1 - smoothing)
		out[i] = plotter.XY{X: l.x, Y: avg / weight}
	}
	return out
}

// epochX is where an epoch's figures sit on the plots' epoch axis: at its
// number for a full epoch, at the fraction reached for a partial one.
func epochX(m trainer.EpochMetrics) float64 {
	if !m.Partial || m.StepsPerEpoch <= 0 {
		return float64(m.Epoch)
	}
	return float64(m.Epoch-1) + float64(m.StepInEpoch)/float64(m.StepsPerEpoch)
}

// plottable keeps the losses a logarithmic axis can show: positive and
// finite (a diverged step's NaN or Inf is left out).
func plottable(losses []stepLoss) []stepLoss {
	var out []stepLoss
	for _, l := range losses {
		if l.loss > 0 && !math.IsInf(l.loss, 0) {
			out = append(out, l)
		}
	}
	return out
}

// writePlot draws lossFigure as a PNG.
func writePlot(w io.Writer, title string, epochs []trainer.EpochMetrics, losses []stepLoss) error {
	f, err := lossFigure(title, epochs, losses)
	if err != nil {
		return err
	}
	return f.Write(w)
}

// lossFigure is two panels under the run's title: the losses on a
// logarithmic axis (the training loss of every step, faint, and smoothed;
// the test loss per epoch), so that the slow descent after the first part
// of an epoch stays visible, and the test accuracy per epoch. Without step
// losses the training loss is drawn per epoch.
func lossFigure(title string, epochs []trainer.EpochMetrics, losses []stepLoss) (plotpng.Figure, error) {
	var train, test, acc []stepLoss
	for _, m := range epochs {
		x := epochX(m)
		train = append(train, stepLoss{x, m.TrainLoss})
		test = append(test, stepLoss{x, m.TestLoss})
		acc = append(acc, stepLoss{x, 100 * m.TestAccuracy})
	}
	losses, train, test = plottable(losses), plottable(train), plottable(test)

	lossPlot := plot.New()
	lossPlot.Title.Text = "Loss (cross-entropy, log scale)"
	// A short label: gonum centres it on the axis's arithmetic mid-range,
	// high on a log axis, where a long one would push the axes down.
	lossPlot.Y.Label.Text = "loss"
	lossPlot.Y.Scale = plot.LogScale{}
	lossPlot.Y.Tick.Marker = logTicks{}
	var err error
	if len(losses) > 0 {
		err = addStepLosses(lossPlot, losses, blue)
	} else {
		err = addLine(lossPlot, "train loss", train, blue)
	}
	if err == nil {
		err = addLine(lossPlot, "test loss", test, orange)
	}
	if err != nil {
		return plotpng.Figure{}, err
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range append(append(losses, train...), test...) {
		lo, hi = min(lo, l.loss), max(hi, l.loss)
	}
	if lo <= hi {
		lossPlot.Y.Min, lossPlot.Y.Max = lo/1.25, hi*1.25
	}

	accPlot := plot.New()
	accPlot.Title.Text = "Test accuracy"
	accPlot.Y.Label.Text = "accuracy (%)"
	if err := addLine(accPlot, "test accuracy", acc, green); err != nil {
		return plotpng.Figure{}, err
	}
	if len(acc) > 0 { // a margin, so that no point sits on the axes' edge
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, a := range acc {
			lo, hi = min(lo, a.loss), max(hi, a.loss)
		}
		pad := max(0.1, 0.1*(hi-lo))
		accPlot.Y.Min, accPlot.Y.Max = lo-pad, hi+pad
	}
	for _, p := range []*plot.Plot{lossPlot, accPlot} {
		p.X.Label.Text = "epoch"
		p.X.Tick.Marker = epochTicks{}
		if n := len(epochs); n > 0 {
			p.X.Min, p.X.Max = epochX(epochs[0])-0.25, epochX(epochs[n-1])+0.25
		}
		if len(losses) > 0 {
			p.X.Min = min(p.X.Min, math.Floor(losses[0].x))
		}
	}
	return plotpng.Figure{Width: lossPlotWidth, Height: lossPlotHeight, Title: title, OutsideLegends: true,
		Plots: []*plot.Plot{lossPlot, accPlot}}, nil
}

// addLine draws points joined by a line, with a legend entry.
func addLine(p *plot.Plot, name string, pts []stepLoss, c color.Color) error {
	xys := make(plotter.XYs, len(pts))
	for i, s := range pts {
		xys[i] = plotter.XY{X: s.x, Y: s.loss}
	}
	l, marks, err := plotter.NewLinePoints(xys)
	if err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	marks.Color = c
	marks.Shape = draw.CircleGlyph{}
	p.Add(l, marks)
	p.Legend.Add(name, l, marks)
	return nil
}

// addStepLosses draws every step's training loss faintly and its smoothed
// curve on top.
func addStepLosses(p *plot.Plot, losses []stepLoss, c color.RGBA) error {
	raw := make(plotter.XYs, len(losses))
	for i, l := range losses {
		raw[i] = plotter.XY{X: l.x, Y: l.loss}
	}
	faint, err := plotter.NewLine(raw)
	if err != nil {
		return fmt.Errorf("plot train loss: %w", err)
	}
	faint.Color = color.NRGBA{R: c.R, G: c.G, B: c.B, A: 80} // not premultiplied: a light shade of c
	faint.Width = vg.Points(0.75)
	line, err := plotter.NewLine(smooth(losses))
	if err != nil {
		return fmt.Errorf("plot train loss: %w", err)
	}
	line.Color = c
	line.Width = vg.Points(1.5)
	p.Add(faint, line)
	p.Legend.Add("train loss per step", faint)
	p.Legend.Add(fmt.Sprintf("train loss (smoothed %.2g)", smoothing), line)
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

// logTicks marks a logarithmic axis at 1, 2 and 5 times each power of ten
// in range, labelled, with unlabelled ticks at the other multiples; over
// more than three decades only the powers of ten are labelled.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi > lo) || math.IsInf(hi, 0) {
		return nil
	}
	first, last := int(math.Floor(math.Log10(lo))), int(math.Ceil(math.Log10(hi)))
	wide := last-first > 3
	var ticks []plot.Tick
	for e := first; e <= last; e++ {
		for m := 1; m <= 9; m++ {
			v := float64(m) * math.Pow(10, float64(e))
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || (!wide && (m == 2 || m == 5)) {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// writeBreakdown draws breakdownFigure as a PNG.
func writeBreakdown(w io.Writer, title string, epochs []trainer.EpochMetrics) error {
	f, _, err := breakdownFigure(title, epochs)
	if err != nil {
		return err
	}
	return f.Write(w)
}

// breakdownFigure is the step-time breakdown per epoch as stacked bars
// (milliseconds per step, averaged over ranks: compute, exposed
// communication, optimizer), under the run's title, with the legend right
// of the axes. It also returns the stacks, bottom layer first. Each epoch
// has a slot of one unit on the axis, with half a slot of margin at both
// ends, and its bar is at most maxBarWidth and 60% of a slot wide, so that
// bars keep apart from each other and from the axes' ends; the y axis
// runs a tenth above the tallest bar.
func breakdownFigure(title string, epochs []trainer.EpochMetrics) (plotpng.Figure, []*plotter.BarChart, error) {
	n := len(epochs)
	compute, exposed, opt := make(plotter.Values, n), make(plotter.Values, n), make(plotter.Values, n)
	labels := make([]string, n)
	for i, m := range epochs {
		b := stepBreakdown(m)
		compute[i], exposed[i], opt[i] = b.compute, b.wait, b.optimizer
		labels[i] = strconv.Itoa(m.Epoch)
		if m.Partial {
			labels[i] += " (partial)"
		}
	}
	p := plot.New()
	p.Title.Text = "Step time per epoch (mean over ranks)"
	p.X.Label.Text = "epoch"
	p.Y.Label.Text = "ms per step"
	p.Y.Min = 0
	layers := []struct {
		name string
		v    plotter.Values
		c    color.RGBA
	}{
		{"compute (forward + backward)", compute, blue},
		{"comm wait (exposed communication)", exposed, red},
		{"optimizer", opt, green},
	}
	var bars []*plotter.BarChart
	for _, l := range layers {
		b, err := plotter.NewBarChart(l.v, maxBarWidth)
		if err != nil {
			return plotpng.Figure{}, nil, fmt.Errorf("plot %s: %w", l.name, err)
		}
		b.Color = l.c
		b.LineStyle.Width = 0
		if len(bars) > 0 {
			b.StackOn(bars[len(bars)-1])
		}
		p.Add(b)
		p.Legend.Add(l.name, b)
		bars = append(bars, b)
	}
	p.NominalX(labels...)
	p.X.Min, p.X.Max = -0.5, float64(n)-0.5
	p.Legend.Padding = vg.Points(3)
	tallest := 0.0
	for i := range n {
		tallest = max(tallest, compute[i]+exposed[i]+opt[i])
	}
	if tallest > 0 {
		p.Y.Max = 1.1 * tallest // headroom: the tallest bar stays off the top
	}
	f := plotpng.Figure{Width: breakdownPlotWidth, Height: breakdownPlotHeight, Title: title, OutsideLegends: true,
		Plots: []*plot.Plot{p}}
	if n > 0 {
		// The slot's width is known once the axes are laid out; bars
		// narrower than the slot leave the layout as it was.
		data := f.Layout().Panels[0].Data
		slot := (data.Max.X - data.Min.X) / vg.Length(n)
		for _, b := range bars {
			b.Width = min(maxBarWidth, 0.6*slot)
		}
	}
	return f, bars, nil
}
