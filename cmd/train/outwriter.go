package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/ringddp/ringddp/internal/run/trainer"
)

// defaultRunsDir is where -out's files go when -out is not given: a
// directory per run under it (TensorBoard's runs/ convention; .gitignore
// has it), named by newRunDir.
const defaultRunsDir = "runs"

// runDirLayout names a run's directory under defaultRunsDir by the time it
// started.
const runDirLayout = "2006-01-02_15-04-05"

// newRunDir creates root/<start, runDirLayout> and returns it; when a run
// that started in the same second has that name, the first free of
// <name>-2, <name>-3, ... up to -99.
func newRunDir(root string, start time.Time) (string, error) {
	if err := makeOutputDir(root); err != nil {
		return "", err
	}
	name := filepath.Join(root, start.Format(runDirLayout))
	for i := 1; i < 100; i++ {
		dir := name
		if i > 1 {
			dir = fmt.Sprintf("%s-%d", name, i)
		}
		err := makeRunDir(dir)
		if !errors.Is(err, os.ErrExist) {
			return dir, err
		}
	}
	return "", fmt.Errorf("%s-2 to %s-99 exist already", name, name)
}

// makeOutputDir creates an output directory and its parents (no error if
// it exists).
func makeOutputDir(path string) error { return os.MkdirAll(path, 0o755) }

// makeRunDir creates one new directory (os.ErrExist if it exists).
func makeRunDir(path string) error { return os.Mkdir(path, 0o755) }

// outWriter (re)writes the -out files off the training goroutine, so that
// drawing the plots after an epoch holds up neither rank 0 nor, waiting for
// it in the next step, the other ranks. Each epoch submits the figures so
// far; a writer goroutine writes the newest submission, so a set submitted
// while another is written replaces any older one still waiting. wait
// returns once everything submitted is written, with the first error.
type outWriter struct {
	dir, title string

	mu      sync.Mutex
	next    *outSnapshot // the newest submission not yet taken
	running bool         // the writer goroutine runs
	err     error        // the first error
	wg      sync.WaitGroup
}

// outSnapshot is what one writing of the files draws.
type outSnapshot struct {
	epochs []trainer.EpochMetrics
	losses []stepLoss
}

// submit hands the epochs and step losses so far to the writer (copies of
// them: the caller goes on appending).
func (w *outWriter) submit(epochs []trainer.EpochMetrics, losses []stepLoss) {
	s := &outSnapshot{epochs: slices.Clone(epochs), losses: slices.Clone(losses)}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next = s
	if !w.running {
		w.running = true
		w.wg.Add(1)
		go w.loop()
	}
}

func (w *outWriter) loop() {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		s := w.next
		w.next = nil
		if s == nil || w.err != nil {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		err := writeOutputs(w.dir, w.title, s.epochs, s.losses)
		if err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
		}
	}
}

// wait waits for the submissions to be written and returns the first
// error.
func (w *outWriter) wait() error {
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// outDir settles -out for this process: the directory given, created; or,
// when -out is not given and this process holds rank 0 (whose report
// writes the files), a new directory under runsDir ("" none) named by
// start.
func (o *options) outDir(runsDir string, start time.Time) error {
	var err error
	switch {
	case o.out != "":
		err = makeOutputDir(o.out)
	case !o.outGiven && runsDir != "" && o.tr.HoldsRank0():
		o.out, err = newRunDir(runsDir, start)
	}
	if err != nil {
		return fmt.Errorf("-out: %w", err)
	}
	return nil
}

// finishOutputs ends the -out files after training, which trainErr ended
// (nil: done): it waits for them to be written; removes the default run
// directory if no epoch wrote into it; and when training failed, says on
// stderr where the outputs written so far are, as the summary would have.
func (r *report) finishOutputs(trainErr error) {
	if err := r.writer.wait(); err != nil && r.outErr == nil {
		r.outErr = err
	}
	if r.o.out != "" && !r.o.outGiven && len(r.all) == 0 {
		removeEmptyDir(r.o.out)
	}
	if trainErr != nil && r.o.tr.HoldsRank0() {
		printWritten(os.Stderr, r.o, len(r.all) > 0)
	}
}

// removeEmptyDir removes dir if it is empty (and leaves it otherwise).
func removeEmptyDir(dir string) { _ = os.Remove(dir) }
