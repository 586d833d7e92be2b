// Package trace records a per-rank timeline of a training run or a
// benchmark and writes it as a Chrome trace-event file, which
// chrome://tracing and Perfetto (ui.perfetto.dev) load.
//
// A Recorder belongs to one rank. Each event is a span (a "ph":"X"
// complete event: a start and a duration) or an instant ("ph":"i") on one
// of the rank's threads, Compute or Comm; in the file the rank is the
// process ("pid") and the thread the "tid", named by metadata events
// ("process_name" "rank 2", "thread_name" "compute"), with times in
// microseconds. A nil *Recorder is tracing off: every method returns at
// once without allocating, so instrumented code calls it unconditionally.
//
//	rec := trace.NewRecorder(rank)                    // nil when tracing is off
//	sp := rec.Begin(trace.Comm, "allreduce", "bucket 0").Int("bytes", n).Str("algorithm", "ring")
//	... the collective ...
//	sp.End()
//	end := rec.Span(trace.Compute, "step", "forward") // convenience: allocates a closure when on
//	end()
//	err := trace.WriteFile("run.json", recs...)       // in-process ranks: one file
//
// Ranks in separate processes each write their own file (WriteFile with
// their recorder; the file keeps the rank's clock base in "otherData"),
// and Merge combines them into one timeline. Their clocks are aligned
// first: SyncClock runs NTP's four-timestamp exchange between rank 0 and
// every other rank over a transport.Conn and returns the rank's offset
// from rank 0's clock, which SetOffset applies to the recorder, so every
// rank's events are on rank 0's clock.
//
// The encoder is written here with encoding/json: no maintained Go library
// for the trace-event format was available (the registry lists only
// OpenTelemetry exporters and chromedp, neither of which writes this
// format), and the format needs a dozen lines.
package trace
