package cpuvariant

import (
	"strings"
	"testing"
)

func table() []Variant[int] {
	return []Variant[int]{
		{Name: "wide", Needs: "AVX-1024", Runs: false, K: 3},
		{Name: "mid", Needs: "AVX2", Runs: true, K: 2},
		{Name: "go", Needs: "nothing", Runs: true, K: 1},
	}
}

func env(v string) func(string) string { return func(string) string { return v } }

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		env, want, err string
	}{
		{env: "", want: "mid"},
		{env: "  ", want: "mid"},
		{env: "go", want: "go"},
		{env: "mid", want: "mid"},
		{env: "wide", err: "pkg: ENV=wide: this CPU lacks AVX-1024 (it runs mid, go)"},
		{env: "sse", err: `pkg: ENV="sse" is not a variant (this CPU runs mid, go)`},
	} {
		v, err := Choose("pkg", "ENV", env(tc.env), table())
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("ENV=%q: error %v, want %q", tc.env, err, tc.err)
		case tc.err == "" && (err != nil || v.Name != tc.want):
			t.Errorf("ENV=%q: %q, %v; want %q", tc.env, v.Name, err, tc.want)
		}
	}
	if _, err := Choose("pkg", "ENV", env(""), []Variant[int]{{Name: "x"}}); err == nil || !strings.Contains(err.Error(), "no variant") {
		t.Errorf("nothing runs: %v", err)
	}
}

func TestSplit(t *testing.T) {
	run, skipped := Split(table())
	if len(run) != 1 || run[0].Name != "mid" || skipped != "skipped variants: wide (this CPU lacks AVX-1024)" {
		t.Fatalf("Split = %v, %q", run, skipped)
	}
	if run, skipped := Split(table()[1:]); len(run) != 1 || skipped != "" {
		t.Fatalf("Split of runnable ones = %v, %q", run, skipped)
	}
}

// Choosing allocates nothing when it succeeds.
func TestChooseDoesNotAllocate(t *testing.T) {
	vs := table()
	get := env("go")
	if n := testing.AllocsPerRun(100, func() { _, _ = Choose("pkg", "ENV", get, vs) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
