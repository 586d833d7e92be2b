// Package cpuvariant chooses among the variants of a kernel package: one
// implementation per instruction set (AVX-512, AVX2, ...), listed fastest
// first and ending with a portable one that every machine runs. The
// fastest variant the CPU runs is the default; an environment variable
// may name another (for tests and benchmarks), and a name the CPU cannot
// run is an error that says which ones it can.
package cpuvariant

import (
	"fmt"
	"strings"
)

// Variant is one instruction set's implementation K of a package's kernels.
type Variant[K any] struct {
	Name  string
	Needs string // the CPU features it requires, for messages
	Runs  bool   // whether this CPU (and its OS) has them
	K     K
}

// Choose returns the variant of vs that the environment variable env (read
// with getenv) names, or the first that runs when it is unset or blank. vs
// lists the variants fastest first and ends with one that always runs. It
// allocates only to report an error, so a caller may choose at every call.
func Choose[K any](pkg, env string, getenv func(string) string, vs []Variant[K]) (Variant[K], error) {
	name := strings.TrimSpace(getenv(env))
	for _, v := range vs {
		if v.Runs && (name == "" || v.Name == name) {
			return v, nil
		}
	}
	runs := strings.Join(names(Runnable(vs)), ", ")
	for _, v := range vs {
		if v.Name == name {
			return Variant[K]{}, fmt.Errorf("%s: %s=%s: this CPU lacks %s (it runs %s)", pkg, env, name, v.Needs, runs)
		}
	}
	if name == "" {
		return Variant[K]{}, fmt.Errorf("%s: no variant runs on this CPU", pkg)
	}
	return Variant[K]{}, fmt.Errorf("%s: %s=%q is not a variant (this CPU runs %s)", pkg, env, name, runs)
}

// Runnable returns the variants of vs this CPU runs, in order.
func Runnable[K any](vs []Variant[K]) []Variant[K] {
	var out []Variant[K]
	for _, v := range vs {
		if v.Runs {
			out = append(out, v)
		}
	}
	return out
}

// Split returns the variants of vs this CPU runs, leaving out the last
// (portable) one, and the text of a line naming those it cannot run, ""
// when it runs them all: what a test of the assembly variants runs and
// logs.
func Split[K any](vs []Variant[K]) (run []Variant[K], skipped string) {
	var lacks []string
	for _, v := range vs[:max(0, len(vs)-1)] {
		if v.Runs {
			run = append(run, v)
		} else {
			lacks = append(lacks, fmt.Sprintf("%s (this CPU lacks %s)", v.Name, v.Needs))
		}
	}
	if len(lacks) > 0 {
		skipped = "skipped variants: " + strings.Join(lacks, ", ")
	}
	return run, skipped
}

func names[K any](vs []Variant[K]) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Name
	}
	return out
}
