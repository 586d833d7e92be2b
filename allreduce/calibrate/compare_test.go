package calibrate

import (
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// TestWriteComparison: each cell is the median of the runs' times over
// the prediction, with the runs' range; runs at 0.8, 1.1 and 1.5 times
// the prediction have the median 1.1 (within 25%), at 0.5, 1.3 and 1.4,
// 1.3 (not); a size an algorithm has no runs at is "-" and not counted.
func TestWriteComparison(t *testing.T) {
	m := cost.DefaultModel(true)
	shape := cost.Shape{Ranks: 4, Nodes: 1}
	times := map[string]map[int][]float64{"ring": {}, "tree": {}}
	for a, factors := range map[string][]float64{"ring": {0.8, 1.1, 1.5}, "tree": {0.5, 1.3, 1.4}} {
		for _, bytes := range []int{4 << 10, 1 << 20} {
			pred, ok := Predicted(m, shape, a, bytes)
			if !ok {
				t.Fatalf("%s cannot run", a)
			}
			for _, f := range factors {
				times[a][bytes] = append(times[a][bytes], pred*f)
			}
		}
	}
	pred, _ := Predicted(m, shape, "ring", 64)
	times["ring"][64] = []float64{2 * pred}
	var b strings.Builder
	if err := WriteComparison(&b, m, shape, []string{"ring", "tree"}, times); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"1.10* [0.80-1.50]", "1.30  [0.50-1.40]", "2.00  [2.00-2.00]  ", "  -" + strings.Repeat(" ", 33) + "\n",
		"# ring         within 25%: 2 of 3 sizes", "# tree         within 25%: 0 of 2 sizes", "# all          within 25%: 2 of 5 cells"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, ok := Predicted(m, shape, "bogus", 64); ok {
		t.Error("a prediction for an unknown algorithm")
	}
}
