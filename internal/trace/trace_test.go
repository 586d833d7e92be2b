package trace_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/internal/trace"
)

func TestNilRecorderAllocatesNothing(t *testing.T) {
	var r *trace.Recorder
	allocs := testing.AllocsPerRun(1000, func() {
		sp := r.Begin(trace.Comm, "allreduce", "bucket 0").Int("bytes", 1<<20).Str("algorithm", "ring")
		sp.End()
		r.Instant(trace.Compute, "ddp", "bucket ready", trace.Int("bucket", 3))
		r.Span(trace.Compute, "forward")()
		r.Complete(trace.Comm, "x", "y", time.Time{}, time.Time{})
	})
	if allocs != 0 {
		t.Fatalf("a nil recorder allocated %v times per run", allocs)
	}
}

// checkFile parses path as generic JSON and checks what the trace-event
// format requires of every event; it returns the events.
func checkFile(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s does not parse: %v", path, err)
	}
	for i, e := range f.TraceEvents {
		for _, k := range []string{"name", "ph", "pid", "tid", "ts"} {
			if _, ok := e[k]; !ok {
				t.Fatalf("event %d %v has no %q", i, e, k)
			}
		}
		switch e["ph"] {
		case "X":
			if d, ok := e["dur"].(float64); !ok || d < 0 {
				t.Fatalf("complete event %d %v has no non-negative dur", i, e)
			}
		case "i", "M":
		default:
			t.Fatalf("event %d has phase %v", i, e["ph"])
		}
	}
	return f.TraceEvents
}

func TestWriteAndMerge(t *testing.T) {
	dir := t.TempDir()
	at := time.Now().Add(50 * time.Millisecond)
	r0 := trace.NewRecorder(0)
	time.Sleep(20 * time.Millisecond) // a later base than rank 0's
	r1 := trace.NewRecorder(1)
	for _, r := range []*trace.Recorder{r0, r1} {
		r.BeginAt(trace.Compute, "step", "forward", at).Int("step", 1).EndAt(at.Add(time.Millisecond))
		r.InstantAt(trace.Comm, "ddp", "bucket 0 ready", trace.Int("bytes", 64), at)
	}
	one := filepath.Join(dir, "one.json")
	if err := trace.WriteFile(one, r0, r1); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "merged.json")
	for _, r := range []*trace.Recorder{r0, r1} {
		if err := trace.WriteFile(trace.RankFile(path, r.Rank()), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := trace.MergeRanks(path, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(trace.RankFile(path, 0)); !os.IsNotExist(err) {
		t.Errorf("rank file left after merging: %v", err)
	}
	for _, p := range []string{one, path} {
		events := checkFile(t, p)
		names := map[float64]string{}
		fwd := map[float64]float64{}
		for _, e := range events {
			pid := e["pid"].(float64)
			if e["name"] == "process_name" {
				names[pid] = e["args"].(map[string]any)["name"].(string)
			}
			if e["name"] == "forward" {
				fwd[pid] = e["ts"].(float64)
			}
		}
		if names[0] != "rank 0" || names[1] != "rank 1" {
			t.Errorf("%s: process names %v", p, names)
		}
		// The same instant on both ranks lands on the same ts.
		if d := fwd[0] - fwd[1]; d > 1 || d < -1 || fwd[0] < 40e3 {
			t.Errorf("%s: forward at %v µs on rank 0, %v on rank 1: want equal, about 50 ms in", p, fwd[0], fwd[1])
		}
	}
}

func TestOffsetShiftsEvents(t *testing.T) {
	r := trace.NewRecorder(3)
	r.SetOffset(5 * time.Millisecond) // this rank's clock is 5 ms ahead
	f := r.Snapshot()
	ref := trace.NewRecorder(0).Snapshot()
	// The base on the reference clock is 5 ms before the local reading.
	if d := ref.Other.BaseUnixNanos - f.Other.BaseUnixNanos; d < int64(4*time.Millisecond) || d > int64(6*time.Millisecond) {
		t.Fatalf("base moved by %v, want about 5ms", time.Duration(d))
	}
}

func TestEstimate(t *testing.T) {
	// The client is 3 ms ahead; legs of 100 µs, one sample delayed on the
	// way out by 2 ms.
	const ahead, leg = int64(3 * time.Millisecond), int64(100 * time.Microsecond)
	mk := func(t1, extra int64) trace.Sample {
		t2 := t1 - ahead + leg + extra
		return trace.Sample{T1: t1, T2: t2, T3: t2 + 10, T4: t2 + 10 + ahead + leg}
	}
	off, delay, err := trace.Estimate([]trace.Sample{mk(1e9, int64(2*time.Millisecond)), mk(2e9, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if off != time.Duration(ahead) || delay != time.Duration(2*leg) {
		t.Fatalf("offset %v delay %v, want 3ms and 200µs", off, delay)
	}
}

// TestSyncClock runs the exchange over in-process ranks whose clocks are
// skewed on purpose: every estimate is within 1 ms of the skew.
func TestSyncClock(t *testing.T) {
	const n = 4
	w, err := inproc.NewWorld(n)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	skew := func(r int) time.Duration { return time.Duration(r*37-50) * time.Millisecond }
	offs := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := skew(0)
			now := func() int64 { return time.Now().UnixNano() + int64(skew(r)-ref) }
			offs[r], _, errs[r] = trace.SyncClock(context.Background(), w.Conn(r), trace.DefaultRounds, now)
		}()
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		want := skew(r) - skew(0)
		if d := offs[r] - want; d > time.Millisecond || d < -time.Millisecond {
			t.Errorf("rank %d: offset %v, want %v within 1ms", r, offs[r], want)
		}
	}
}

// BenchmarkSpan is the cost of one recorded span with two arguments.
func BenchmarkSpan(b *testing.B) {
	r := trace.NewRecorder(0)
	r.SetMaxEvents(1 << 30)
	b.ReportAllocs()
	for b.Loop() {
		r.Begin(trace.Comm, "collective", "bucket 0").Int("bytes", 1<<20).Str("collective", "allreduce ring").End()
	}
}
