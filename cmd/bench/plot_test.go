package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlot: -plot writes a PNG that decodes, for in-process, simulated and
// tcp ranks (where rank 0's process holds the rows and draws them).
func TestPlot(t *testing.T) {
	dir := t.TempDir()
	for name, args := range map[string][]string{
		"inproc": {"-ranks", "3", "-algo", "ring,doubling", "-iters", "2", "-warmup", "0"},
		"sim":    {"-transport", "sim", "-ranks", "16", "-nodes", "4", "-algo", "all"},
		"tcp":    {"-transport", "tcp", "-ranks", "2", "-algo", "ring,tree", "-iters", "2", "-warmup", "0"},
		"single": {"-ranks", "2", "-min", "1K", "-max", "1K", "-factor", "1", "-iters", "1", "-warmup", "0"},
	} {
		path := filepath.Join(dir, name+".png")
		args = append(args, "-min", "1K", "-max", "64K", "-factor", "8", "-plot", path, "-json")
		if out, err := runBench(t, args...); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 400 {
			t.Errorf("%s: %v", name, b)
		}
	}
}

func TestSizeLabels(t *testing.T) {
	for k, want := range map[int]string{0: "1", 3: "8", 10: "1K", 16: "64K", 20: "1M", 28: "256M", 30: "1G"} {
		if got := sizeLabel(k); got != want {
			t.Errorf("sizeLabel(%d) = %q, want %q", k, got, want)
		}
	}
}

// -plot says where it wrote, after the table (on stderr with -json, whose
// stdout is the JSON rows only).
func TestPlotSaysWhere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.png")
	out, err := runBench(t, "-ranks", "2", "-min", "1K", "-max", "1K", "-iters", "1", "-warmup", "0", "-plot", path)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.HasSuffix(out, "plot: "+path+"\n") {
		t.Errorf("the output does not end with where -plot wrote:\n%s", out)
	}
}
