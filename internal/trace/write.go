package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"

	"github.com/ringddp/ringddp/internal/outfile"
)

// File is a trace file's content: Chrome's JSON object format.
type File struct {
	Events          []Event   `json:"traceEvents"`
	DisplayTimeUnit string    `json:"displayTimeUnit,omitempty"`
	Other           OtherData `json:"otherData"`
}

// OtherData is what a file says about itself beyond its events.
type OtherData struct {
	// BaseUnixNanos is the time (Unix nanoseconds, on the reference
	// clock) of ts 0: Merge aligns files by it.
	BaseUnixNanos int64 `json:"base_unix_ns"`
	// ClockOffsetNanos is each rank's clock minus the reference clock
	// as estimated at start (SyncClock), by rank ("0" for in-process
	// ranks).
	ClockOffsetNanos map[string]int64 `json:"clock_offset_ns,omitempty"`
	Dropped          int              `json:"dropped_events,omitempty"`
}

// Event is one trace event as written: "ph" X (complete), i (instant) or
// M (metadata); "ts" and "dur" in microseconds; "pid" the rank, "tid" the
// Thread.
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	S    string         `json:"s,omitempty"` // instant scope: "t" (thread)
	Args map[string]any `json:"args,omitempty"`
}

// micros converts nanoseconds to microseconds, kept to the nanosecond.
func micros(ns int64) float64 { return math.Round(float64(ns)) / 1e3 }

// Snapshot returns the recorder's events as a File (times relative to its
// own start on the reference clock), with the rank's metadata events.
func (r *Recorder) Snapshot() File {
	if r == nil {
		return File{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	base := r.start.UnixNano() - int64(r.offset)
	f := File{DisplayTimeUnit: "ms", Other: OtherData{BaseUnixNanos: base,
		ClockOffsetNanos: map[string]int64{strconv.Itoa(r.rank): int64(r.offset)}, Dropped: r.dropped}}
	f.Events = append(f.Events, metadata(r.rank)...)
	for _, e := range r.all() {
		je := Event{Name: e.name, Cat: e.cat, Ph: string(e.ph), Ts: micros(e.ts), Pid: r.rank, Tid: int(e.tid)}
		if e.ph == 'X' {
			d := micros(e.dur)
			je.Dur = &d
		} else {
			je.S = "t"
		}
		if e.nargs > 0 {
			je.Args = make(map[string]any, e.nargs)
			for _, a := range e.args[:e.nargs] {
				if a.str {
					je.Args[a.Key] = a.Str
				} else {
					je.Args[a.Key] = a.Num
				}
			}
		}
		f.Events = append(f.Events, je)
	}
	return f
}

// metadata names rank's process and threads.
func metadata(rank int) []Event {
	name := func(what, v string, tid int) Event {
		return Event{Name: what, Ph: "M", Pid: rank, Tid: tid, Args: map[string]any{"name": v}}
	}
	return []Event{
		name("process_name", "rank "+strconv.Itoa(rank), 0),
		{Name: "process_sort_index", Ph: "M", Pid: rank, Args: map[string]any{"sort_index": rank}},
		name("thread_name", Compute.String(), int(Compute)),
		name("thread_name", Comm.String(), int(Comm)),
	}
}

// Combine puts files on one time base, the earliest of theirs: each
// file's events are shifted by the difference of its base from it.
func Combine(files ...File) File {
	out := File{DisplayTimeUnit: "ms"}
	if len(files) == 0 {
		return out
	}
	base := files[0].Other.BaseUnixNanos
	for _, f := range files[1:] {
		base = min(base, f.Other.BaseUnixNanos)
	}
	out.Other.BaseUnixNanos = base
	for _, f := range files {
		shift := micros(f.Other.BaseUnixNanos - base)
		for _, e := range f.Events {
			if e.Ph != "M" {
				e.Ts = math.Round((e.Ts+shift)*1e3) / 1e3 // to the nanosecond
			}
			out.Events = append(out.Events, e)
		}
		for k, v := range f.Other.ClockOffsetNanos {
			if out.Other.ClockOffsetNanos == nil {
				out.Other.ClockOffsetNanos = map[string]int64{}
			}
			out.Other.ClockOffsetNanos[k] = v
		}
		out.Other.Dropped += f.Other.Dropped
	}
	// Metadata first, then by time: stable, so a rank's events keep their
	// order.
	slices.SortStableFunc(out.Events, func(a, b Event) int {
		switch {
		case (a.Ph == "M") != (b.Ph == "M"):
			if a.Ph == "M" {
				return -1
			}
			return 1
		case a.Ts < b.Ts:
			return -1
		case a.Ts > b.Ts:
			return 1
		}
		return 0
	})
	return out
}

// Write writes the recorders' events as one trace (in-process ranks share
// a clock; ranks of other processes need SetOffset first).
func Write(w io.Writer, recs ...*Recorder) error {
	files := make([]File, 0, len(recs))
	for _, r := range recs {
		if r != nil {
			files = append(files, r.Snapshot())
		}
	}
	return Encode(w, Combine(files...))
}

// Encode writes f as JSON, one event per line.
func Encode(w io.Writer, f File) error {
	bw := bufio.NewWriter(w)
	if _, err := bw.WriteString("{\"traceEvents\":[\n"); err != nil {
		return err
	}
	enc := json.NewEncoder(bw) // Encode ends each value with a newline
	for i, e := range f.Events {
		if i > 0 {
			bw.WriteByte(',')
		}
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	other, err := json.Marshal(f.Other)
	if err != nil {
		return err
	}
	unit := f.DisplayTimeUnit
	if unit == "" {
		unit = "ms"
	}
	fmt.Fprintf(bw, "],\"displayTimeUnit\":%q,\"otherData\":%s}\n", unit, other)
	return bw.Flush()
}

// WriteFile writes the recorders' trace to path (atomically: a temporary
// file renamed into place).
func WriteFile(path string, recs ...*Recorder) error {
	return writeAtomic(path, func(w io.Writer) error { return Write(w, recs...) })
}

// ReadFile reads a trace file written by WriteFile, Merge or Encode.
func ReadFile(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return File{}, err
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return File{}, fmt.Errorf("trace: %s: %w", path, err)
	}
	return f, nil
}

// Merge combines the trace files in (each rank's, on the reference clock)
// into one at out, aligned by their bases.
func Merge(out string, in ...string) error {
	if len(in) == 0 {
		return errors.New("trace: nothing to merge")
	}
	files := make([]File, 0, len(in))
	for _, p := range in {
		f, err := ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	merged := Combine(files...)
	return writeAtomic(out, func(w io.Writer) error { return Encode(w, merged) })
}

// RankFile is the name of rank's part of a trace written to path by
// ranks in separate processes: path.rank<r>.
func RankFile(path string, rank int) string { return path + ".rank" + strconv.Itoa(rank) }

// MergeRanks merges RankFile(path, r) for r in [0, ranks) into path and
// removes them; the missing ones (a rank that died before writing) are
// listed in the error after the others are merged.
func MergeRanks(path string, ranks int) error {
	missing, err := MergeFound(path, ranks)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		files := make([]string, len(missing))
		for i, r := range missing {
			files[i] = RankFile(path, r)
		}
		return fmt.Errorf("trace: %s merged without %v (not written)", path, files)
	}
	return nil
}

// MergeFound merges every RankFile(path, r), r in [0, ranks), that exists
// into path, removes them and returns the ranks whose files it did not
// find (ranks of other hosts, whose parts are on those hosts' disks, or
// ranks that died before writing). Finding none is an error.
func MergeFound(path string, ranks int) (missing []int, err error) {
	var in []string
	for r := range ranks {
		p := RankFile(path, r)
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, r)
			continue
		}
		in = append(in, p)
	}
	if len(in) == 0 {
		return missing, fmt.Errorf("trace: no rank wrote its part of %s", path)
	}
	if err := Merge(path, in...); err != nil {
		return missing, err
	}
	for _, p := range in {
		_ = os.Remove(p)
	}
	return missing, nil
}

// writeAtomic replaces path with what write writes (outfile.Write): a new
// temporary file renamed over it, so a symbolic link at path is replaced,
// never followed; mode 0644 less the umask, as PyTorch's profiler traces.
func writeAtomic(path string, write func(io.Writer) error) error {
	if err := outfile.Write(path, outfile.Shared, write); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}
