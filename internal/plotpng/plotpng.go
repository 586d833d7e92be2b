// Package plotpng writes gonum plots as PNG images in the commands' one
// layout: a column of plots, aligned on their axes, with the same padding.
package plotpng

import (
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WriteColumn draws plots one above the other, their axes aligned, on a
// width × height image and writes it to w as a PNG.
func WriteColumn(w io.Writer, width, height vg.Length, plots ...*plot.Plot) error {
	img := vgimg.New(width, height)
	dc := draw.New(img)
	if len(plots) == 1 {
		plots[0].Draw(dc)
	} else {
		tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
			PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 4 * vg.Millimeter}
		grid := make([][]*plot.Plot, len(plots))
		for i, p := range plots {
			grid[i] = []*plot.Plot{p}
		}
		canvases := plot.Align(grid, tiles, dc)
		for i, p := range plots {
			p.Draw(canvases[i][0])
		}
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}
