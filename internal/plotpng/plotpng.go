// Package plotpng writes gonum plots as PNG images in the commands' one
// layout: a column of plots, aligned on their axes, with the same padding,
// under an optional title line naming what the image shows.
//
// Vocabulary (all rectangles in the image's coordinates: points, origin at
// the bottom left):
//
//   - the figure is the whole image: a title line on top, then the
//     panels, one plot each, top to bottom;
//   - a panel's area is the tile its plot is drawn in (its own title, axes
//     and data); its data rectangle is where the plot draws its data; the
//     panels' data rectangles are aligned and of one size (column);
//   - a legend goes inside the panel's data rectangle, where the plot
//     places it (Legend.Top, Legend.Left), or, with OutsideLegends, in a
//     column right of every panel, level with the top of its data
//     rectangle, where it can cover no data.
//
// Layout computes every rectangle without drawing, so tests check the
// layout rather than pixels; Write draws by the same layout.
package plotpng

import (
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Padding around and between the panels, and between the title line and
// the first panel.
const (
	padOuter = 3 * vg.Millimeter
	padPanel = 4 * vg.Millimeter
	padTitle = 2 * vg.Millimeter
)

// Figure is a column of plots on a Width × Height image.
type Figure struct {
	Width, Height vg.Length
	// Title, if set, is drawn centred on the image's first line: what the
	// image shows (the run, the sweep).
	Title string
	// OutsideLegends draws every plot's legend right of the panels
	// instead of inside its data rectangle.
	OutsideLegends bool
	Plots          []*plot.Plot
}

// Panel is where one plot goes.
type Panel struct {
	Area   vg.Rectangle // the plot's tile: its title, axes and data
	Data   vg.Rectangle // where its data is drawn
	Legend vg.Rectangle // its legend (empty without entries)
	canvas draw.Canvas
}

// Layout is where a Figure's parts go.
type Layout struct {
	Image  vg.Rectangle
	Title  vg.Rectangle // empty without a title
	Panels []Panel      // in Figure.Plots' order
}

// WriteColumn draws plots one above the other, their axes aligned, on a
// width × height image and writes it to w as a PNG, their legends inside.
func WriteColumn(w io.Writer, width, height vg.Length, plots ...*plot.Plot) error {
	return Figure{Width: width, Height: height, Plots: plots}.Write(w)
}

// titleStyle is the figure title's text style: a plot title's, larger.
func titleStyle() draw.TextStyle {
	sty := plot.New().Title.TextStyle
	sty.Font.Size *= 1.2
	return sty
}

// legendSize is the size of p's legend (zero without entries).
func legendSize(p *plot.Plot) vg.Point {
	r := p.Legend.Rectangle(draw.Canvas{})
	return r.Size()
}

// Layout computes the figure's layout on its Width × Height image, drawing
// nothing.
func (f Figure) Layout() Layout {
	return f.layoutOn(draw.Canvas{Rectangle: vg.Rectangle{Max: vg.Point{X: f.Width, Y: f.Height}}})
}

// layoutOn computes the figure's layout on dc (its steps: the title line at
// the top, the legend column at the right with OutsideLegends, the panels
// stacked in what is left (column), each legend placed).
func (f Figure) layoutOn(dc draw.Canvas) Layout {
	l := Layout{Image: dc.Rectangle}
	area := dc
	area.Min.X += padOuter
	area.Max.X -= padOuter
	area.Min.Y += padOuter
	area.Max.Y -= padOuter
	if f.Title != "" {
		sty := titleStyle()
		h := sty.Rectangle(f.Title).Size().Y
		l.Title = vg.Rectangle{Min: vg.Point{X: area.Min.X, Y: area.Max.Y - h}, Max: area.Max}
		area.Max.Y -= h + padTitle
	}
	var legendW vg.Length
	if f.OutsideLegends {
		for _, p := range f.Plots {
			legendW = max(legendW, legendSize(p).X)
		}
		if legendW > 0 {
			area.Max.X -= legendW + padPanel
		}
	}
	tiles := column(f.Plots, area)
	for i, p := range f.Plots {
		c := tiles[i]
		pn := Panel{Area: c.Rectangle, Data: p.DataCanvas(c).Rectangle, canvas: c}
		if size := legendSize(p); size.X > 0 {
			pn.Legend = legendRect(p, pn, size, f.OutsideLegends, area.Max.X+padPanel)
		}
		l.Panels = append(l.Panels, pn)
	}
	return l
}

// column stacks plots top to bottom in area with padPanel between them,
// their data rectangles aligned and of one size, and returns their tiles.
// Its steps: each plot's insets, the room between its tile's edges and its
// data rectangle (title, axes, labels), measured on area; the data
// rectangles span area's width less the widest left and right insets, and
// share its height less every plot's top and bottom insets and the
// padding; each tile is its data rectangle grown by the plot's own insets.
func column(plots []*plot.Plot, area draw.Canvas) []draw.Canvas {
	type insets struct{ left, right, bottom, top vg.Length }
	in := make([]insets, len(plots))
	var left, right, height vg.Length
	height = area.Max.Y - area.Min.Y - vg.Length(max(0, len(plots)-1))*padPanel
	for i, p := range plots {
		d := p.DataCanvas(area)
		in[i] = insets{d.Min.X - area.Min.X, area.Max.X - d.Max.X, d.Min.Y - area.Min.Y, area.Max.Y - d.Max.Y}
		left, right = max(left, in[i].left), max(right, in[i].right)
		height -= in[i].bottom + in[i].top
	}
	h := height / vg.Length(max(1, len(plots)))
	tiles := make([]draw.Canvas, len(plots))
	top := area.Max.Y
	for i := range plots {
		bottom := top - in[i].top - h - in[i].bottom
		tiles[i] = draw.Canvas{Canvas: area.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: area.Min.X + left - in[i].left, Y: bottom},
			Max: vg.Point{X: area.Max.X - right + in[i].right, Y: top},
		}}
		top = bottom - padPanel
	}
	return tiles
}

// legendRect is where p's legend of size goes in panel pn: at the top of
// the column starting at x when outside, else in the corner of the data
// rectangle its Top and Left name.
func legendRect(p *plot.Plot, pn Panel, size vg.Point, outside bool, x vg.Length) vg.Rectangle {
	d := pn.Data
	if outside {
		return vg.Rectangle{Min: vg.Point{X: x, Y: d.Max.Y - size.Y}, Max: vg.Point{X: x + size.X, Y: d.Max.Y}}
	}
	r := vg.Rectangle{Min: vg.Point{X: d.Max.X - size.X, Y: d.Min.Y}, Max: vg.Point{X: d.Max.X, Y: d.Min.Y + size.Y}}
	if p.Legend.Left {
		r.Min.X, r.Max.X = d.Min.X, d.Min.X+size.X
	}
	if p.Legend.Top {
		r.Min.Y, r.Max.Y = d.Max.Y-size.Y, d.Max.Y
	}
	return r
}

// Draw draws the figure on dc by its layout and returns the layout.
func (f Figure) Draw(dc draw.Canvas) Layout {
	l := f.layoutOn(dc)
	if f.Title != "" {
		sty := titleStyle() // aligned at its top, as plot titles are
		descent := sty.FontExtents().Descent
		dc.FillText(sty, vg.Point{X: (l.Title.Min.X + l.Title.Max.X) / 2, Y: l.Title.Max.Y + descent}, f.Title)
	}
	for i, p := range f.Plots {
		pn := l.Panels[i]
		legend := p.Legend
		p.Legend = plot.NewLegend() // drawn below, where the layout put it
		p.Draw(pn.canvas)
		p.Legend = legend
		if pn.Legend.Size().X > 0 {
			legend.Top, legend.Left = true, true
			legend.XOffs, legend.YOffs = 0, 0
			legend.Draw(draw.Canvas{Canvas: dc.Canvas, Rectangle: pn.Legend})
		}
	}
	return l
}

// Write draws the figure and writes it to w as a PNG.
func (f Figure) Write(w io.Writer) error {
	img := vgimg.New(f.Width, f.Height)
	f.Draw(draw.New(img))
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
