package main

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ringddp/ringddp/internal/plotpng"
	"github.com/ringddp/ringddp/internal/safetensors"
)

// writePlotFile draws the rows of a run (-plot) into a PNG at path,
// atomically.
func writePlotFile(cfg *config, path string, rows []row) error {
	if err := safetensors.AtomicWriteFile(path, func(w io.Writer) error {
		return writePlot(cfg, w, rows)
	}); err != nil {
		return fmt.Errorf("-plot %s: %w", path, err)
	}
	return nil
}

// series is one algorithm's points, in row order.
type series struct {
	algo        string
	busbw, time plotter.XYs
}

// bySeries groups rows by algorithm, in the order the algorithms ran,
// leaving out the rows a log scale cannot place (0 bytes or 0 time).
func bySeries(rows []row) []*series {
	var out []*series
	index := map[string]*series{}
	for _, r := range rows {
		if r.Bytes <= 0 || !(r.TimeUS > 0) {
			continue
		}
		s := index[r.Algo]
		if s == nil {
			s = &series{algo: r.Algo}
			index[r.Algo] = s
			out = append(out, s)
		}
		x := float64(r.Bytes)
		s.busbw = append(s.busbw, plotter.XY{X: x, Y: r.BusBW})
		s.time = append(s.time, plotter.XY{X: x, Y: r.TimeUS})
	}
	return out
}

// writePlot draws two panels against the size (log2 axis), one line per
// algorithm: the bus bandwidth and the time (log axis), as a PNG. The
// style is cmd/train's.
func writePlot(cfg *config, w io.Writer, rows []row) error {
	all := bySeries(rows)
	if len(all) == 0 {
		return errors.New("no row with bytes > 0 and a time to draw")
	}
	title := fmt.Sprintf("%s, %s, %d ranks%s, %s", cfg.op.name, cfg.transport, cfg.ranks, nodesText(cfg), cfg.dtype)

	bw := plot.New()
	bw.Title.Text = "Bus bandwidth: " + title
	bw.Y.Label.Text = "busbw (GB/s)"
	bw.Y.Min = 0
	tm := plot.New()
	tm.Title.Text = "Time"
	tm.Y.Label.Text = "time (µs)"
	tm.Y.Scale = plot.LogScale{}
	tm.Y.Tick.Marker = plot.LogTicks{Prec: -1}

	lo, hi := math.Inf(1), math.Inf(-1)
	tlo, thi := math.Inf(1), math.Inf(-1)
	for i, s := range all {
		c, g := plotColor(i), plotGlyph(i)
		if err := addLine(bw, s.algo, s.busbw, c, g); err != nil {
			return err
		}
		if err := addLine(tm, s.algo, s.time, c, g); err != nil {
			return err
		}
		for _, p := range s.time {
			lo, hi = min(lo, p.X), max(hi, p.X)
			tlo, thi = min(tlo, p.Y), max(thi, p.Y)
		}
	}
	for _, p := range []*plot.Plot{bw, tm} {
		p.X.Label.Text = "size (bytes)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = pow2Ticks{}
		p.X.Min, p.X.Max = lo/1.5, hi*1.5
		p.Legend.Top = true
		p.Legend.Left = true
	}
	tm.Y.Min, tm.Y.Max = tlo/1.5, thi*1.5

	return plotpng.WriteColumn(w, 8*vg.Inch, 9*vg.Inch, bw, tm)
}

// addLine adds one algorithm's line with its points and legend entry.
func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color, g draw.GlyphDrawer) error {
	l, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	pts.Color = c
	pts.Shape = g
	p.Add(l, pts)
	p.Legend.Add(name, l, pts)
	return nil
}

// plotColor is the i-th line's colour (matplotlib's tab10, as cmd/train).
func plotColor(i int) color.Color {
	tab10 := [...]color.RGBA{
		{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255}, {148, 103, 189, 255},
		{140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}, {188, 189, 34, 255}, {23, 190, 207, 255},
	}
	return tab10[i%len(tab10)]
}

// plotGlyph is the i-th line's point shape, so that lines differ in print.
func plotGlyph(i int) draw.GlyphDrawer {
	shapes := [...]draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{},
		draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}, draw.PlusGlyph{}}
	return shapes[i%len(shapes)]
}

// pow2Ticks marks the powers of two of a size axis, labelled in binary
// units (8, 1K, 64M), every one when there are few, else every other or
// every fourth, with unlabelled minor ticks between.
type pow2Ticks struct{}

func (pow2Ticks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi >= lo) {
		return nil
	}
	first, last := int(math.Ceil(math.Log2(lo))), int(math.Floor(math.Log2(hi)))
	step := 1
	for (last-first)/step > 10 {
		step *= 2
	}
	var ticks []plot.Tick
	for k := first; k <= last; k++ {
		t := plot.Tick{Value: math.Ldexp(1, k)}
		if k%step == 0 {
			t.Label = sizeLabel(k)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// sizeLabel is 2^k bytes as 8, 1K, 64M, 1G.
func sizeLabel(k int) string {
	if k < 0 {
		return fmt.Sprintf("2^%d", k)
	}
	units := []string{"", "K", "M", "G", "T", "P", "E"}
	u := min(k/10, len(units)-1)
	return fmt.Sprintf("%d%s", uint64(1)<<(k-10*u), units[u])
}
