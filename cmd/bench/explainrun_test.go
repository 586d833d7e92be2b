package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// -explain names what runs: for layouts, models and sizes that are not
// powers of two (where the least predicted time at the size itself and at
// its class's lower end can differ), the pick -explain -json gives for
// each size is the algorithm the run's groups record running for it (the
// rows' "ran": Group.AlgorithmFor, the group's record of Auto's pick).
func TestExplainNamesWhatRuns(t *testing.T) {
	sweep := []string{"-min", "1000", "-max", "3M", "-factor", "3"}
	cases := [][]string{
		{"-ranks", "4", "-local-size", "2"},
		{"-ranks", "6", "-local-size", "2", "-inter-gbps", "1"},
		{"-ranks", "6", "-local-size", "3", "-inter-gbps", "1", "-alpha-us", "50"},
		{"-ranks", "8", "-local-size", "2", "-inter-gbps", "8", "-intra-gbps", "400"},
		{"-ranks", "5"},
		{"-ranks", "7", "-local-size", "3", "-cores", "2"},
	}
	differ := 0 // sizes whose class's pick is not the least prediction at the size itself
	for _, c := range cases {
		out, err := runBench(t, append(append(c, sweep...), "-explain", "-json")...)
		if err != nil {
			t.Fatalf("%v -explain: %v\n%s", c, err, out)
		}
		picks := map[int]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var e explanation
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			picks[e.Bytes] = e.Pick
			best := e.Pick
			for a, us := range e.PredictedUS {
				if us < e.PredictedUS[best]*(1-1e-9) {
					best = a
				}
			}
			if best != e.Pick {
				differ++
			}
		}
		out, err = runBench(t, append(append(c, sweep...), "-iters", "1", "-warmup", "0", "-check=false", "-json")...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
		rows := jsonObjects(t, out)
		if len(rows) != len(picks) || len(rows) == 0 {
			t.Fatalf("%v: %d rows, %d explained sizes", c, len(rows), len(picks))
		}
		for _, r := range rows {
			b := int(num(t, r, "bytes"))
			if r["algo"] != "auto" || r["ran"] != picks[b] {
				t.Errorf("%v at %d B: -explain picks %q, the run's group ran %v (algo %v)", c, b, picks[b], r["ran"], r["algo"])
			}
		}
	}
	t.Logf("%d sizes where the least prediction at the size itself is not what runs", differ)
}
