package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/calibrate"
)

// -compare checks earlier runs against the cost model: the prediction
// accuracy of docs/scaling.md, reproducible. Its input is the rows of
// runs made with -json (one JSON object per line, as output.go writes
// them), several runs of the same sweep; for every all-reduce algorithm
// and size it prints the median of the runs' times, the model's
// prediction for the flags' shape (plannedShape: -transport, -ranks,
// -local-size) under the run's model (-profile, the model flags or the
// default, as -explain), their ratio and the range of the runs' ratios,
// and per algorithm how many sizes are within 25% and the rms of the log
// ratio. Runs nothing.

// compareRuns is what -compare read: every run's time (seconds) by
// algorithm and bytes, the algorithms in their first row's order, and how
// many files.
type compareRuns struct {
	times map[string]map[int][]float64
	algos []string
	files int
}

// readCompareRuns reads the rows of the files that the comma-separated
// patterns name (globs, or plain paths). Every row must be a run of the
// flags' transport and ranks; rows of other collectives are left out.
func readCompareRuns(patterns, transport string, ranks int) (*compareRuns, error) {
	var files []string
	for _, p := range strings.Split(patterns, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		matched, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("-compare %q: %w", p, err)
		}
		if len(matched) == 0 {
			return nil, fmt.Errorf("-compare %q: no such file", p)
		}
		files = append(files, matched...)
	}
	if len(files) == 0 {
		return nil, errors.New("-compare: no files given")
	}
	runs := &compareRuns{times: map[string]map[int][]float64{}, files: len(files)}
	for _, f := range files {
		if err := runs.read(f, transport, ranks); err != nil {
			return nil, err
		}
	}
	if len(runs.algos) == 0 {
		return nil, fmt.Errorf("-compare: no all-reduce rows in %s", strings.Join(files, ", "))
	}
	return runs, nil
}

// read adds one file's rows.
func (c *compareRuns) read(path, transport string, ranks int) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("-compare: %w", err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		var r row
		if err := json.Unmarshal([]byte(text), &r); err != nil {
			return fmt.Errorf("-compare: %s:%d: not a row of -json output: %v", path, line, err)
		}
		switch {
		case r.Transport != transport || r.Ranks != ranks:
			return fmt.Errorf("-compare: %s:%d: a run over %s on %d ranks; the flags say -transport %s -ranks %d", path, line, r.Transport, r.Ranks, transport, ranks)
		case r.Op != "allreduce":
			continue
		case !(r.TimeUS > 0) || math.IsInf(r.TimeUS, 0) || r.Bytes < 0:
			return fmt.Errorf("-compare: %s:%d: time %v µs for %d bytes: need a time > 0", path, line, r.TimeUS, r.Bytes)
		}
		if _, err := allreduce.ParseAlgorithm(r.Algo); err != nil {
			return fmt.Errorf("-compare: %s:%d: %w", path, line, err)
		}
		byBytes := c.times[r.Algo]
		if byBytes == nil {
			byBytes = map[int][]float64{}
			c.times[r.Algo] = byBytes
			c.algos = append(c.algos, r.Algo)
		}
		byBytes[r.Bytes] = append(byBytes[r.Bytes], r.TimeUS*1e-6)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("-compare: %s: %w", path, err)
	}
	return nil
}

// compare prints the runs of cfg.compare against the model (see above;
// calibrate.WriteComparison writes the table).
func compare(cfg *config, w io.Writer) error {
	runs, err := readCompareRuns(cfg.compare, cfg.transport, cfg.ranks)
	if err != nil {
		return err
	}
	m, from := cfg.explainModel()
	shape := plannedShape(cfg)
	algos := runs.algos
	if cfg.algoGiven {
		algos = nil
		for _, a := range cfg.algos {
			if runs.times[a.String()] == nil {
				return fmt.Errorf("-compare -algo %s: no rows of it in the runs (they have %s)", a, strings.Join(runs.algos, ", "))
			}
			algos = append(algos, a.String())
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# ringddp bench -compare: %d file(s) of all-reduce runs over %s on %d ranks (%s), against the model's predictions\n", runs.files, cfg.transport, cfg.ranks, cfg.compare)
	fmt.Fprintf(&b, "# model: %s (%s)\n", describeModel(m), from)
	fmt.Fprintf(&b, "# each cell: the median of the runs' times / the predicted time (µs), their ratio, [the runs' ratios' range]; * within %.0f%%\n#\n", calibrate.WithinBand*100)
	if err := calibrate.WriteComparison(&b, m, shape, algos, runs.times); err != nil {
		return err
	}
	_, err = io.WriteString(w, b.String())
	return err
}
