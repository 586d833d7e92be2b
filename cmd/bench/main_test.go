package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/internal/run/launch/selftest"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/calibrate"
	"github.com/ringddp/ringddp/allreduce/cost"
)

var rowKeys = []string{"algbw_gbps", "algo", "busbw_gbps", "bytes", "count", "dtype", "op", "ran", "ranks", "time_us", "transport", "wrong"}

func runBench(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := runWith(ctx, args, &out, selftest.RankCommand)
	return out.String(), err
}

// jsonRows parses -json output: every line one object with exactly rowKeys.
func jsonRows(t *testing.T, out string) []map[string]any {
	t.Helper()
	rows := jsonObjects(t, out)
	for _, m := range rows {
		keys := slices.Sorted(maps.Keys(m))
		if !slices.Equal(keys, rowKeys) {
			t.Fatalf("keys %v, want exactly %v", keys, rowKeys)
		}
	}
	return rows
}

func num(t *testing.T, m map[string]any, k string) float64 {
	t.Helper()
	n, ok := m[k].(json.Number)
	if !ok {
		t.Fatalf("%s = %#v, want a number", k, m[k])
	}
	f, err := n.Float64()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestEveryOpIsCorrect(t *testing.T) {
	type variant struct{ dtype, redop string }
	variants := []variant{{"float32", "sum"}, {"float64", "avg"}, {"int32", "max"}, {"int64", "prod"}, {"float32", "min"},
		{"float16", "avg"}, {"bfloat16", "sum"}}
	ops := []string{"allreduce", "reducescatter", "allgather", "broadcast", "reduce"}
	for _, op := range ops {
		for _, ranks := range []int{1, 3, 4} {
			for vi, v := range variants {
				if op != "allreduce" && vi > 1 && ranks != 3 {
					continue // the full dtype × redop matrix on 3 ranks only
				}
				name := fmt.Sprintf("%s/ranks=%d/%s/%s", op, ranks, v.dtype, v.redop)
				t.Run(name, func(t *testing.T) {
					out, err := runBench(t, "-op", op, "-ranks", strconv.Itoa(ranks), "-dtype", v.dtype, "-redop", v.redop,
						"-min", "8", "-max", "4K", "-factor", "8", "-iters", "3", "-warmup", "1",
						"-root", strconv.Itoa(ranks-1), "-json")
					if err != nil {
						t.Fatalf("run: %v\n%s", err, out)
					}
					rows := jsonRows(t, out)
					if len(rows) != 4 { // 8, 64, 512, 4096
						t.Fatalf("%d rows, want 4:\n%s", len(rows), out)
					}
					esz := map[string]int{"float32": 4, "int32": 4, "float64": 8, "int64": 8, "float16": 2, "bfloat16": 2}[v.dtype]
					for i, r := range rows {
						if r["op"] != op || r["transport"] != "inproc" || r["algo"] != "auto" || r["dtype"] != v.dtype {
							t.Errorf("row %d: %v", i, r)
						}
						if got := num(t, r, "ranks"); got != float64(ranks) {
							t.Errorf("row %d: ranks %v", i, got)
						}
						if w := num(t, r, "wrong"); w != 0 {
							t.Errorf("row %d: %v wrong elements", i, w)
						}
						b, c := int(num(t, r, "bytes")), int(num(t, r, "count"))
						size := 8 << (3 * i)
						wantCount := size / esz
						if op == "allgather" || op == "reducescatter" {
							wantCount -= wantCount % ranks
						}
						if c != wantCount || b != c*esz {
							t.Errorf("row %d: bytes %d count %d, want count %d bytes %d", i, b, c, wantCount, wantCount*esz)
						}
						if tm := num(t, r, "time_us"); tm <= 0 {
							t.Errorf("row %d: time %v", i, tm)
						}
					}
				})
			}
		}
	}
}

func TestAllReduceAlgorithms(t *testing.T) {
	for _, algo := range []string{"ring", "auto", "direct"} {
		for _, ranks := range []int{1, 3, 4} {
			out, err := runBench(t, "-op", "allreduce", "-algo", algo, "-ranks", strconv.Itoa(ranks),
				"-min", "8", "-max", "256K", "-factor", "8", "-iters", "2", "-warmup", "1", "-json")
			if err != nil {
				t.Fatalf("%s, %d ranks: %v\n%s", algo, ranks, err, out)
			}
			for _, r := range jsonRows(t, out) {
				if r["algo"] != algo || num(t, r, "wrong") != 0 {
					t.Errorf("%s, %d ranks: %v", algo, ranks, r)
				}
			}
		}
	}
}

func TestBusBandwidthFactor(t *testing.T) {
	want := map[string]float64{"allreduce": 2 * 3.0 / 4, "reducescatter": 3.0 / 4, "allgather": 3.0 / 4, "broadcast": 1, "reduce": 1}
	for op, f := range want {
		out, err := runBench(t, "-op", op, "-min", "64K", "-max", "64K", "-factor", "1", "-iters", "2", "-warmup", "0", "-json")
		if err != nil {
			t.Fatal(err)
		}
		r := jsonRows(t, out)[0]
		algbw, busbw := num(t, r, "algbw_gbps"), num(t, r, "busbw_gbps")
		if got := algbw * 1e3 * num(t, r, "time_us"); got < 0.999*65536 || got > 1.001*65536 {
			t.Errorf("%s: algbw×time = %v bytes, want 65536", op, got)
		}
		if busbw < 0.999*algbw*f || busbw > 1.001*algbw*f {
			t.Errorf("%s: busbw %v, want algbw %v × %v", op, busbw, algbw, f)
		}
	}
}

func TestTableOutput(t *testing.T) {
	out, err := runBench(t, "-op", "allreduce", "-ranks", "4", "-algo", "auto", "-min", "8", "-max", "1K", "-factor", "2", "-iters", "2", "-warmup", "0")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rows int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 10 || f[2] != "float32" || f[3] != "sum" || f[9] != "0" {
			t.Errorf("row %q", line)
			continue
		}
		// The algo column names auto's pick: the cost model's choice for
		// 4 in-process ranks (one node, memory shared in place) for the
		// size's power-of-two class, worked out here from the model.
		n, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("row %q: %v", line, err)
		}
		s := cost.FlatShape(4)
		s.PeerMemory = true
		if want := "auto:" + allreduce.Choose(cost.DefaultModelFor(s), s, 1<<(bits.Len(uint(n))-1)).String(); f[5] != want {
			t.Errorf("row %q: algo %s, want %s", line, f[5], want)
		}
		rows++
	}
	if rows != 8 { // 8 .. 1024
		t.Errorf("%d rows, want 8:\n%s", rows, out)
	}
	for _, s := range []string{"busbw = algbw * 2(N-1)/N", "# wrong elements    : 0 OK", "#wrong"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestNoCheck(t *testing.T) {
	out, err := runBench(t, "-op", "allgather", "-ranks", "2", "-min", "1K", "-max", "1K", "-factor", "1", "-iters", "1", "-check=false", "-json")
	if err != nil {
		t.Fatal(err)
	}
	if r := jsonRows(t, out)[0]; r["wrong"] != nil {
		t.Errorf("wrong = %v, want null without -check", r["wrong"])
	}
}

func TestHelp(t *testing.T) {
	out, err := runBench(t, "-h")
	if err != nil || !strings.Contains(out, "-redop") {
		t.Errorf("-h: err %v, output:\n%s", err, out)
	}
}

func TestFlagErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-op", "alltoall"}, "-op"},
		{[]string{"-transport", "pigeon"}, "-transport \"pigeon\": unknown transport (valid: "},
		{[]string{"-algo", "nosuch"}, "-algo"},
		{[]string{"-dtype", "float8"}, "-dtype"},
		{[]string{"-redop", "xor"}, "-redop"},
		{[]string{"-redop", "avg", "-dtype", "int32"}, "-redop avg"},
		{[]string{"-ranks", "0"}, "-ranks"},
		{[]string{"-iters", "0"}, "-iters"},
		{[]string{"-warmup", "-1"}, "-warmup"},
		{[]string{"-min", "1M", "-max", "64K"}, "-min"},
		{[]string{"-min", "abc"}, "-min"},
		{[]string{"-max", "12Q"}, "-max"},
		{[]string{"-factor", "1"}, "-factor"},
		{[]string{"-factor", "0", "-min", "8", "-max", "8"}, "-factor"},
		{[]string{"-min", "0"}, "-min"},
		{[]string{"-op", "broadcast", "-root", "4"}, "-root"},
		{[]string{"-op", "reduce", "-root", "-1"}, "-root"},
		{[]string{"-ranks", "x"}, "-ranks"},
		{[]string{"-timeout", "-1s"}, "-timeout -1s: must not be negative"},
		{[]string{"-master", "h:1"}, "-master applies to -transport tcp only"},
		{[]string{"-nosuch"}, "-nosuch"},
		{[]string{"stray"}, "stray"},
	}
	for _, c := range cases {
		_, err := runBench(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
	// factor 1 is fine when there is one size; so is a root outside -ranks
	// for a collective without a root.
	for _, args := range [][]string{
		{"-factor", "1", "-min", "64", "-max", "64"},
		{"-op", "allreduce", "-root", "9"},
	} {
		args = append(args, "-iters", "1", "-warmup", "0", "-max", "64")
		if out, err := runBench(t, args...); err != nil {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
}

func TestMedian(t *testing.T) {
	if m := calibrate.Median([]float64{5, 1, 3}); m != 3 {
		t.Errorf("median of 3 = %v", m)
	}
	if m := calibrate.Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 4 = %v", m)
	}
}

// TestCheckCatchesUnwrittenOutput: the poisoned buffers count as wrong when
// the collective does not run, so a collective that writes nothing cannot
// pass the check.
func TestCheckCatchesUnwrittenOutput(t *testing.T) {
	for _, op := range []string{"reducescatter", "allgather", "broadcast"} {
		cfg, err := parseConfig([]string{"-op", op, "-ranks", "2", "-min", "64", "-max", "64", "-factor", "1", "-root", "0"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		data := newDataset[float32](cfg)
		count := cfg.count(64)
		lo, hi := allreduce.ChunkBounds(count, 2, 1)
		s := &rankState[float32]{cfg: cfg, rank: 1, in: data.input(1), buf: make([]float32, data.maxCount)}
		s.reset(count, lo, hi, false)
		want := int64(count)
		if op == "reducescatter" {
			want = int64(hi - lo)
		}
		if w := s.countWrong(data.expected(count), count, lo, hi); w != want {
			t.Errorf("%s: %d wrong of %d unwritten elements", op, w, want)
		}
	}
}
