package main

import (
	"fmt"
	"image/color"
	"io"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/ringddp/ringddp/internal/plotpng"
	"github.com/ringddp/ringddp/internal/run/trainer"
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

// stepMillis is an epoch's per-step time breakdown in milliseconds:
// compute (forward and backward), exposed communication (not hidden by
// the backward pass) and the optimizer.
func stepMillis(m trainer.EpochMetrics) (compute, exposed, opt float64) {
	if m.Steps <= 0 {
		return 0, 0, 0
	}
	per := 1e3 / float64(m.Steps)
	return m.ComputeSeconds * per, m.CommWaitSeconds * per, m.OptimizerSeconds * per
}

// writeBreakdown draws the step-time breakdown per epoch as stacked bars
// (milliseconds per step: compute, exposed communication, optimizer), as a
// PNG.
func writeBreakdown(w io.Writer, epochs []trainer.EpochMetrics) error {
	n := len(epochs)
	compute, exposed, opt := make(plotter.Values, n), make(plotter.Values, n), make(plotter.Values, n)
	labels := make([]string, n)
	for i, m := range epochs {
		compute[i], exposed[i], opt[i] = stepMillis(m)
		labels[i] = strconv.Itoa(m.Epoch)
		if m.Partial {
			labels[i] += " (partial)"
		}
	}
	p := plot.New()
	p.Title.Text = "Step time per epoch"
	p.X.Label.Text = "epoch"
	p.Y.Label.Text = "ms per step"
	p.Y.Min = 0
	width := vg.Points(28)
	layers := []struct {
		name string
		v    plotter.Values
		c    color.RGBA
	}{
		{"compute (forward + backward)", compute, color.RGBA{R: 31, G: 119, B: 180, A: 255}},
		{"exposed communication", exposed, color.RGBA{R: 214, G: 39, B: 40, A: 255}},
		{"optimizer", opt, color.RGBA{R: 44, G: 160, B: 44, A: 255}},
	}
	var below *plotter.BarChart
	for _, l := range layers {
		b, err := plotter.NewBarChart(l.v, width)
		if err != nil {
			return fmt.Errorf("plot %s: %w", l.name, err)
		}
		b.Color = l.c
		b.LineStyle.Width = 0
		if below != nil {
			b.StackOn(below)
		}
		p.Add(b)
		p.Legend.Add(l.name, b)
		below = b
	}
	p.Legend.Top = true
	p.NominalX(labels...)
	return plotpng.WriteColumn(w, 7*vg.Inch, 4*vg.Inch, p)
}
