package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce/calibrate"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// writeRuns writes one -json file per run: for each algorithm and size a
// row whose time is the model's prediction times that run's factor.
func writeRuns(t *testing.T, dir string, m cost.Model, shape cost.Shape, algos []string, sizes []int, factors []float64) {
	t.Helper()
	for i, f := range factors {
		var b strings.Builder
		for _, a := range algos {
			for _, bytes := range sizes {
				pred, ok := calibrate.Predicted(m, shape, a, bytes)
				if !ok {
					t.Fatalf("%s cannot run", a)
				}
				line, err := json.Marshal(row{Op: "allreduce", Transport: "inproc", Ranks: shape.Ranks, Algo: a, DType: "float32", Bytes: bytes, Count: bytes / 4, TimeUS: pred * f * 1e6})
				if err != nil {
					t.Fatal(err)
				}
				b.Write(line)
				b.WriteString("\n")
			}
		}
		b.WriteString(`{"op":"broadcast","transport":"inproc","ranks":4,"algo":"tree","bytes":64,"time_us":3}` + "\n") // another collective: left out
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("run-%d.json", i)), []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// -compare reads the runs, takes the median of each cell and counts the
// sizes within 25% of the prediction: runs made at 0.8, 1.1 and 1.5 times
// the model's time have the median 1.1 (within); at 0.5, 1.3 and 1.4, 1.3
// (not).
func TestCompare(t *testing.T) {
	dir := t.TempDir()
	m := defaultModel("inproc")
	cfg := &config{transport: "inproc", ranks: 4}
	shape := plannedShape(cfg)
	sizes := []int{4 << 10, 1 << 20}
	writeRuns(t, filepath.Join(dir), m, shape, []string{"ring", "hd"}, sizes, []float64{0.8, 1.1, 1.5})
	out, err := runBench(t, "-compare", filepath.Join(dir, "run-*.json"), "-transport", "inproc", "-ranks", "4")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"3 file(s)", "1.10* [0.80-1.50]", "ring         within 25%: 2 of 2 sizes; rms of the log ratio 9.5%", "all          within 25%: 4 of 4 cells"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	far := t.TempDir()
	writeRuns(t, far, m, shape, []string{"ring", "tree", "hd"}, sizes, []float64{0.5, 1.3, 1.4})
	out, err = runBench(t, "-compare", filepath.Join(far, "run-0.json")+","+filepath.Join(far, "run-1*.json")+","+filepath.Join(far, "run-2.json"), "-transport", "inproc", "-ranks", "4", "-algo", "tree")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"1.30  [0.50-1.40]", "tree         within 25%: 0 of 2 sizes", "all          within 25%: 0 of 2 cells"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ring ") {
		t.Errorf("-algo tree printed other algorithms:\n%s", out)
	}
}

// Bad input to -compare: an error that names what was wrong.
func TestCompareErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `{"op":"allreduce","transport":"inproc","ranks":4,"algo":"ring","bytes":4096,"time_us":20}` + "\n"
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"missing", []string{"-compare", filepath.Join(dir, "none-*.json")}, "no such file"},
		{"garbage", []string{"-compare", write("garbage.json", "not json\n")}, "garbage.json:1: not a row"},
		{"transport", []string{"-compare", write("tcp.json", `{"op":"allreduce","transport":"tcp","ranks":4,"algo":"ring","bytes":4096,"time_us":20}`+"\n")}, "a run over tcp on 4 ranks"},
		{"ranks", []string{"-compare", write("ranks.json", good), "-ranks", "3"}, "-ranks 3"},
		{"time", []string{"-compare", write("time.json", `{"op":"allreduce","transport":"inproc","ranks":4,"algo":"ring","bytes":4096,"time_us":0}`+"\n")}, "need a time > 0"},
		{"algorithm", []string{"-compare", write("algo.json", `{"op":"allreduce","transport":"inproc","ranks":4,"algo":"bogus","bytes":4096,"time_us":5}`+"\n")}, "bogus"},
		{"empty", []string{"-compare", write("empty.json", `{"op":"broadcast","transport":"inproc","ranks":4,"algo":"tree","bytes":8,"time_us":5}`+"\n")}, "no all-reduce rows"},
		{"absent algo", []string{"-compare", write("ring.json", good), "-algo", "hd"}, "no rows of it"},
		{"json", []string{"-compare", write("j.json", good), "-json"}, "leave out -json"},
		{"explain", []string{"-compare", write("e.json", good), "-explain"}, "runs nothing"},
	} {
		args := append([]string{"-transport", "inproc", "-ranks", "4"}, c.args...)
		out, err := runBench(t, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q\n%s", c.name, err, c.want, out)
		}
	}
}
