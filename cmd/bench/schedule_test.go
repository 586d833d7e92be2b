package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
)

// TestSchedules: -schedule runs broadcast's and reduce's schedules, each a
// sweep of its own, rows named by the schedule and every result checked;
// with a profile, each row's pick is the schedule that ran (auto's choice
// for auto) and its pred that schedule's formula (PredictRooted). Also on
// the simulator, whose times are the formulas'.
func TestSchedules(t *testing.T) {
	path := filepath.Join("..", "..", "allreduce", "testdata", "profiles", "inproc-4.json")
	p, err := cost.ReadProfile(path, allreduce.KnownMeasurement)
	if err != nil {
		t.Fatal(err)
	}
	for _, transport := range []string{"inproc", "sim"} {
		for _, op := range []string{"broadcast", "reduce"} {
			out, err := runBench(t, "-transport", transport, "-op", op, "-schedule", "all", "-ranks", "3", "-min", "4K", "-max", "4M",
				"-factor", "32", "-iters", "2", "-warmup", "0", "-json", "-profile", path)
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", transport, op, err, out)
			}
			var got []string
			for _, r := range jsonObjects(t, out) {
				bytes := int(num(t, r, "bytes"))
				got = append(got, fmt.Sprintf("%v/%d", r["algo"], bytes))
				if w := num(t, r, "wrong"); w != 0 {
					t.Errorf("%s %s %v: %v wrong", transport, op, r["algo"], w)
				}
				kind := map[string]allreduce.Kind{"broadcast": allreduce.KindBroadcast, "reduce": allreduce.KindReduce}[op]
				pr, err := allreduce.PredictRooted(p.Model, cost.FlatShape(3), kind, bytes)
				if err != nil {
					t.Fatal(err)
				}
				pick, pred := "tree", pr.TreeSeconds
				if r["algo"] == "chain" || r["algo"] == "auto" && pr.Chain {
					pick, pred = "chain", pr.ChainSeconds
				}
				if r["pick"] != pick || math.Abs(num(t, r, "pred_us")-pred*1e6) > 1e-6*pred*1e6 {
					t.Errorf("%s %s %v of %d B: pick %v, pred %v µs; want %s, %.3f", transport, op, r["algo"], bytes, r["pick"], r["pred_us"], pick, pred*1e6)
				}
				if transport == "sim" && math.Abs(num(t, r, "ratio")-1) > 0.01 {
					t.Errorf("sim %s %v of %d B: measured / predicted %v, want 1", op, r["algo"], bytes, r["ratio"])
				}
			}
			want := "auto/4096 auto/131072 auto/4194304 tree/4096 tree/131072 tree/4194304 chain/4096 chain/131072 chain/4194304"
			if strings.Join(got, " ") != want {
				t.Errorf("%s %s rows %v, want %s", transport, op, got, want)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-schedule", "tree"}, "-schedule applies to -op broadcast and reduce, not allreduce"},
		{[]string{"-op", "broadcast", "-schedule", "ring"}, `unknown Broadcast/Reduce schedule "ring" (want one of auto, tree, chain)`},
		{[]string{"-op", "reduce", "-schedule", "chain,chain"}, "-schedule chain,chain: chain twice"},
	} {
		if _, err := runBench(t, append(c.args, "-max", "64")...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
}
