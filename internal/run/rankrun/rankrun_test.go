package rankrun_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/internal/run/rankrun"
)

// TestRootCause: rank 2 fails with its own error while waiting ranks fail
// as its consequence; Err names rank 2, and the others failed at once.
func TestRootCause(t *testing.T) {
	w, err := inproc.NewWorld(3, inproc.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rankrun.NewGroups(w.Endpoints())
	if errs != nil {
		t.Fatal(errs)
	}
	defer func() {
		for _, g := range groups {
			_ = g.Close()
		}
	}()
	cause := errors.New("bad batch")
	start := time.Now()
	errs = rankrun.RunGroups(groups, func(i int, g *allreduce.Group) error {
		if g.Rank() == 2 {
			time.Sleep(10 * time.Millisecond)
			return cause
		}
		return allreduce.Barrier(context.Background(), g)
	})
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the others took %v to fail", el)
	}
	if err := rankrun.Err(groups, errs); !errors.Is(err, cause) || !strings.HasPrefix(err.Error(), "rank 2: ") {
		t.Errorf("Err: %v, want rank 2's error", err)
	}
	if rankrun.Err(groups, make([]error, 3)) != nil {
		t.Error("Err of no errors is not nil")
	}
}

// TestNoTestingPackage: commands use this package, so it must not link
// package testing.
func TestNoTestingPackage(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command")
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "testing" {
			t.Fatal("package rankrun depends on package testing")
		}
	}
}
