package main

import (
	"strings"
	"testing"
)

// TestLocalSize: in-process ranks on simulated nodes (-local-size) run the
// topology-aware algorithms with no wrong element, uneven last node
// included; asking for one without a topology, a negative size, or
// -local-size over tcp is an error before any rank starts.
func TestLocalSize(t *testing.T) {
	for _, algo := range []string{"hierarchical", "torus", "mesh", "ring"} {
		out, err := runBench(t, "-algo", algo, "-ranks", "7", "-local-size", "3",
			"-min", "8", "-max", "256K", "-factor", "16", "-iters", "2", "-warmup", "1", "-json")
		if err != nil {
			t.Fatalf("%s: %v\n%s", algo, err, out)
		}
		rows := jsonRows(t, out)
		if len(rows) == 0 {
			t.Fatalf("%s: no rows", algo)
		}
		for _, r := range rows {
			if r["algo"] != algo || num(t, r, "wrong") != 0 {
				t.Errorf("%s: %v", algo, r)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-algo", "torus"}, "-algo torus: "},
		{[]string{"-local-size", "-1"}, "-local-size -1: must not be negative"},
		{[]string{"-transport", "tcp", "-local-size", "2"}, "RINGDDP_NODE"},
	} {
		_, err := runBench(t, append(c.args, "-max", "64", "-iters", "1", "-warmup", "0")...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}
