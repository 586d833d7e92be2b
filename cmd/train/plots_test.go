package main

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ringddp/ringddp/internal/run/trainer"
)

// plotEpochs are n epochs of figures, the last one partial.
func plotEpochs(n int) []trainer.EpochMetrics {
	var out []trainer.EpochMetrics
	for e := 1; e <= n; e++ {
		out = append(out, trainer.EpochMetrics{Epoch: e, Steps: 100, StepInEpoch: 100, StepsPerEpoch: 100,
			TrainLoss: 0.5 / float64(e), TestLoss: 0.3 / float64(e), TestAccuracy: 0.9 + 0.01*float64(e),
			ComputeSeconds: 1.2 + 0.1*float64(e), CommWaitSeconds: 0.4, CommHiddenSeconds: 0.1, CommSeconds: 0.5, OptimizerSeconds: 0.05})
	}
	out[n-1].Partial, out[n-1].StepInEpoch, out[n-1].Steps = true, 40, 40
	return out
}

func intersects(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

func inside(a, outer vg.Rectangle) bool {
	return a.Min.X >= outer.Min.X && a.Max.X <= outer.Max.X && a.Min.Y >= outer.Min.Y && a.Max.Y <= outer.Max.Y
}

// step_time.png's layout: the run's title below the image's top edge, the
// legend clear of every bar (it sits right of the axes), each bar inside
// the axes and the last one a margin away from their right end, for few
// epochs and for many.
func TestBreakdownLayout(t *testing.T) {
	const title = "mlp float32, 4 ranks over inproc, DDP, run of 2026-01-02 03:04:05 UTC"
	for _, n := range []int{1, 3, 40} {
		f, bars, err := breakdownFigure(title, plotEpochs(n))
		require.NoError(t, err)
		l := f.Layout()
		require.Len(t, l.Panels, 1)
		pn := l.Panels[0]
		require.Greater(t, l.Title.Size().Y, vg.Length(0))
		require.GreaterOrEqual(t, l.Image.Max.Y-l.Title.Max.Y, vg.Millimeter, "the title touches the top")
		require.LessOrEqual(t, pn.Area.Max.Y, l.Title.Min.Y, "the panel overlaps the title")
		require.True(t, inside(pn.Legend, l.Image), "legend %v outside the image %v", pn.Legend, l.Image)
		require.False(t, intersects(pn.Legend, pn.Data), "legend %v over the data %v", pn.Legend, pn.Data)

		p := f.Plots[0]
		dc := draw.Canvas{Rectangle: pn.Data}
		tx, ty := p.Transforms(&dc)
		top := bars[len(bars)-1]
		var prevRight vg.Length = -1
		for i := range n {
			total := 0.0
			for _, b := range bars {
				total += b.Values[i]
			}
			w := top.Width
			bar := vg.Rectangle{Min: vg.Point{X: tx(float64(i)) - w/2, Y: ty(0)}, Max: vg.Point{X: tx(float64(i)) + w/2, Y: ty(total)}}
			require.True(t, inside(bar, pn.Data), "bar %d %v outside the data area %v", i, bar, pn.Data)
			require.Greater(t, pn.Data.Max.Y-bar.Max.Y, vg.Length(0), "bar %d reaches the top of the axes", i)
			require.False(t, intersects(bar, pn.Legend), "legend over bar %d", i)
			require.Greater(t, bar.Min.X, prevRight, "bar %d overlaps the one before", i)
			prevRight = bar.Max.X
			if i == n-1 {
				slot := (pn.Data.Max.X - pn.Data.Min.X) / vg.Length(n)
				require.InDelta(t, float64(slot), float64(tx(1)-tx(0)), 1e-6, "a slot per epoch")
				require.Greater(t, float64(slot-w), 0.3*float64(slot), "bars spaced")
				require.GreaterOrEqual(t, pn.Data.Max.X-bar.Max.X, 0.99*(slot-w)/2, "the last bar is against the right edge")
			}
		}
	}
}

// loss_accuracy.png: the loss axis is logarithmic and spans the losses;
// non-positive and infinite losses are left out, not an error.
func TestLossFigureLogAxis(t *testing.T) {
	losses := []stepLoss{{0.01, 2.3}, {0.5, 0.4}, {1, 0.08}, {1.2, 0}, {1.3, math.Inf(1)}, {1.4, 0.05}}
	f, err := lossFigure("run", plotEpochs(2), losses)
	require.NoError(t, err)
	lossPlot := f.Plots[0]
	require.IsType(t, plot.LogScale{}, lossPlot.Y.Scale)
	require.Less(t, lossPlot.Y.Min, 0.05)
	require.Greater(t, lossPlot.Y.Min, 0.0)
	require.Greater(t, lossPlot.Y.Max, 2.3)
	l := f.Layout()
	for i, pn := range l.Panels {
		// Above the data only the panel's title: no gap from the axis label.
		require.Less(t, pn.Area.Max.Y-pn.Data.Max.Y, 20*vg.Length(1), "panel %d: space above the data", i)
		if pn.Legend.Size().X > 0 {
			require.False(t, intersects(pn.Legend, pn.Data), "panel %d: legend over the data", i)
		}
	}
	labels := 0
	for _, tk := range (logTicks{}).Ticks(0.04, 3) {
		if tk.Label != "" {
			labels++
		}
	}
	require.GreaterOrEqual(t, labels, 4, "a readable log axis has several labels over two decades")
}

// writeOutputs renders both PNGs (and the CSV) into a directory: each
// decodes, at the size it was drawn.
func TestWriteOutputsPNG(t *testing.T) {
	dir := t.TempDir()
	title := runTitle(trainer.Plan{Model: "mlp", DType: "float32", Ranks: 4}, "inproc", false, time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)))
	require.Equal(t, "mlp float32, 4 ranks over inproc, DDP, run of 2026-01-02 03:04:05 CET", title)
	losses := []stepLoss{{0.01, 2.3}, {0.5, 0.4}, {1, 0.08}, {1.5, 0.06}, {2.4, 0.05}}
	require.NoError(t, writeOutputs(dir, title, plotEpochs(3), losses))
	for name, size := range map[string][2]vg.Length{
		plotFile:      {lossPlotWidth, lossPlotHeight},
		breakdownFile: {breakdownPlotWidth, breakdownPlotHeight},
	} {
		f, err := os.Open(filepath.Join(dir, name))
		require.NoError(t, err)
		img, err := png.Decode(f)
		f.Close()
		require.NoError(t, err, name)
		b := img.Bounds()
		require.InDelta(t, size[0].Dots(96), b.Dx(), 1, name)
		require.InDelta(t, size[1].Dots(96), b.Dy(), 1, name)
	}
	st, err := os.Stat(filepath.Join(dir, metricsFile))
	require.NoError(t, err)
	require.Greater(t, st.Size(), int64(0))
}
