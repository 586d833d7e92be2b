package plotpng

import (
	"bytes"
	"image/png"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

func linePlot(t *testing.T, title, ylabel string, legend ...string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.X.Label.Text = "x"
	for i, name := range legend {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: float64(i)}, {X: 10, Y: float64(10 * (i + 1))}})
		require.NoError(t, err)
		p.Add(l)
		p.Legend.Add(name, l)
	}
	return p
}

func within(a, outer vg.Rectangle) bool {
	return a.Min.X >= outer.Min.X && a.Max.X <= outer.Max.X && a.Min.Y >= outer.Min.Y && a.Max.Y <= outer.Max.Y
}

func overlap(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

// The layout: the title inside the image, off its top edge; panels top to
// bottom, apart, inside the image and below the title; data rectangles
// aligned and of one height whatever the axis labels; legends outside the
// data with OutsideLegends, in the corner they name without; and the PNG
// has the figure's size.
func TestLayout(t *testing.T) {
	for _, outside := range []bool{false, true} {
		top := linePlot(t, "first", "a long label on the y axis", "one", "two")
		top.Legend.Top = true
		bottom := linePlot(t, "second", "y", "three")
		bottom.Legend.Left = true
		f := Figure{Width: 6 * vg.Inch, Height: 6 * vg.Inch, Title: "the run", OutsideLegends: outside, Plots: []*plot.Plot{top, bottom}}
		l := f.Layout()
		require.True(t, within(l.Title, l.Image))
		require.GreaterOrEqual(t, l.Image.Max.Y-l.Title.Max.Y, padOuter)
		require.Len(t, l.Panels, 2)
		a, b := l.Panels[0], l.Panels[1]
		require.True(t, within(a.Area, l.Image) && within(b.Area, l.Image))
		require.LessOrEqual(t, a.Area.Max.Y, l.Title.Min.Y)
		require.False(t, overlap(a.Area, b.Area))
		require.Greater(t, a.Data.Min.Y, b.Data.Max.Y, "first above second")
		require.InDelta(t, float64(a.Data.Min.X), float64(b.Data.Min.X), 1e-6, "aligned left")
		require.InDelta(t, float64(a.Data.Max.X), float64(b.Data.Max.X), 1e-6, "aligned right")
		require.InDelta(t, float64(a.Data.Size().Y), float64(b.Data.Size().Y), 1e-6, "one height")
		for i, pn := range l.Panels {
			require.True(t, within(pn.Legend, l.Image), "panel %d legend", i)
			require.Greater(t, pn.Legend.Size().X, vg.Length(0))
			if outside {
				require.False(t, overlap(pn.Legend, pn.Data), "panel %d legend over data", i)
				require.GreaterOrEqual(t, pn.Legend.Min.X, pn.Data.Max.X)
			} else {
				require.True(t, within(pn.Legend, pn.Data), "panel %d legend inside", i)
			}
		}
		if !outside {
			require.InDelta(t, float64(a.Data.Max.Y), float64(a.Legend.Max.Y), 1e-6, "top")
			require.InDelta(t, float64(a.Data.Max.X), float64(a.Legend.Max.X), 1e-6, "right")
			require.InDelta(t, float64(b.Data.Min.Y), float64(b.Legend.Min.Y), 1e-6, "bottom")
			require.InDelta(t, float64(b.Data.Min.X), float64(b.Legend.Min.X), 1e-6, "left")
		}

		var buf bytes.Buffer
		require.NoError(t, f.Write(&buf))
		img, err := png.Decode(&buf)
		require.NoError(t, err)
		require.Equal(t, int(f.Width.Dots(96)+0.5), img.Bounds().Dx())
		require.Equal(t, int(f.Height.Dots(96)+0.5), img.Bounds().Dy())
	}
}
