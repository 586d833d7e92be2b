package depcheck

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The layers of internal/, as the tree shows them: internal/run/... is the
// roof (above the library packages: it runs a job's ranks, launches their
// processes, trains, and checks collectives against their reference, for
// the commands and the test harnesses); every other package under internal/
// is the floor (below them: kernels, file formats, input validation,
// tracing, plots). The floor depends on nothing of the module but the
// floor, the numeric vocabulary and the transport interface (the trace's
// clock exchange sends over a transport.Conn); outside the roof, only the
// commands, the examples, the benchmarks and the test harnesses depend on
// the roof.

const roof = "internal/run/"

// floorMay lists the packages outside internal/ that the floor may use.
var floorMay = []string{"numeric", "allreduce/transport"}

// roofUsers lists the packages outside internal/run that may depend on the
// roof: the test harnesses that run ranks and check against the reference
// (commands, examples and benchmarks are above every layer anyway).
var roofUsers = []string{"allreduce/allreducetest", "allreduce/internal/transporthelp"}

func TestFloorAndRoof(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command")
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], module+"/")
		if !ok {
			continue
		}
		for _, dep := range fields[1:] {
			d, ok := strings.CutPrefix(dep, module+"/")
			if !ok {
				continue
			}
			if msg := layerViolation(pkg, d); msg != "" {
				t.Errorf("%s depends on %s: %s", pkg, d, msg)
			}
		}
	}
}

// layerViolation says why pkg may not depend on dep, or "" if it may.
func layerViolation(pkg, dep string) string {
	switch {
	case isFloor(pkg) && !isFloor(dep) && !slices.Contains(floorMay, dep):
		return "the floor (internal/, not internal/run/) depends only on the floor and " + strings.Join(floorMay, ", ")
	case strings.HasPrefix(dep, roof) && !strings.HasPrefix(pkg, roof) && !aboveEveryLayer(pkg) && !slices.Contains(roofUsers, pkg):
		return "only the commands, the examples, the benchmarks and the test harnesses use the roof (internal/run/)"
	}
	return ""
}

func isFloor(pkg string) bool {
	return strings.HasPrefix(pkg, "internal/") && !strings.HasPrefix(pkg, roof)
}

func aboveEveryLayer(pkg string) bool {
	for _, top := range []string{"cmd/", "examples/", "bench/"} {
		if strings.HasPrefix(pkg, top) {
			return true
		}
	}
	return false
}

func TestLayerViolation(t *testing.T) {
	for _, c := range []struct {
		pkg, dep string
		bad      bool
	}{
		{"internal/blas", "internal/gemm", false},
		{"internal/trace", "allreduce/transport", false},
		{"internal/gemm", "numeric", false},
		{"internal/trace", "allreduce", true},
		{"internal/gemm", "internal/run/rankrun", true},
		{"internal/run/trainer", "ddp", false},
		{"internal/run/trainer", "internal/run/rankrun", false},
		{"ddp", "internal/run/trainer", true},
		{"allreduce", "internal/run/reference", true},
		{"allreduce/allreducetest", "internal/run/reference", false},
		{"cmd/bench", "internal/run/launch", false},
	} {
		if got := layerViolation(c.pkg, c.dep) != ""; got != c.bad {
			t.Errorf("layerViolation(%s, %s) reports %v, want %v", c.pkg, c.dep, got, c.bad)
		}
	}
}
