package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/ringddp/ringddp/internal/run/trainer"
)

// progress shows training progress within an epoch. All methods are called
// from rank 0's goroutine.
type progress interface {
	plan(trainer.Plan)
	step(trainer.StepInfo)
	done() // the epoch's steps are over (idempotent)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// chooseProgress: a progress bar per epoch when the output is a terminal
// (stderr when stdout carries JSON), plain progress lines when it is not,
// nothing with -quiet or when JSON goes to a non-terminal.
func chooseProgress(stdout io.Writer, jsonOut, quiet bool) progress {
	switch {
	case quiet:
		return noProgress{}
	case !jsonOut && isTerminal(stdout):
		return &barProgress{w: stdout}
	case jsonOut && isTerminal(os.Stderr):
		return &barProgress{w: os.Stderr}
	case jsonOut:
		return noProgress{}
	}
	return &lineProgress{w: stdout}
}

type noProgress struct{}

func (noProgress) plan(trainer.Plan)     {}
func (noProgress) step(trainer.StepInfo) {}
func (noProgress) done()                 {}

// barProgress draws a progress bar per epoch.
type barProgress struct {
	w      io.Writer
	epochs int
	bar    *progressbar.ProgressBar
	epoch  int
}

func (b *barProgress) plan(p trainer.Plan) { b.epochs = p.Epochs }

func (b *barProgress) step(s trainer.StepInfo) {
	if b.bar == nil || b.epoch != s.Epoch {
		b.done()
		b.epoch = s.Epoch
		b.bar = progressbar.NewOptions(s.StepsPerEpoch,
			progressbar.OptionSetWriter(b.w),
			progressbar.OptionSetDescription(fmt.Sprintf("epoch %d/%d", s.Epoch+1, b.epochs)),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionSetPredictTime(true),
		)
	}
	b.bar.Describe(fmt.Sprintf("epoch %d/%d loss %.4f", s.Epoch+1, b.epochs, s.Loss))
	_ = b.bar.Set(s.Step)
}

func (b *barProgress) done() {
	if b.bar != nil {
		_ = b.bar.Finish()
		_ = b.bar.Clear()
		b.bar = nil
	}
}

// lineProgress prints a line about every tenth of an epoch.
type lineProgress struct {
	w      io.Writer
	epochs int
	start  time.Time
}

func (l *lineProgress) plan(p trainer.Plan) { l.epochs = p.Epochs }

func (l *lineProgress) step(s trainer.StepInfo) {
	every := max(1, s.StepsPerEpoch/10)
	if l.start.IsZero() {
		l.start = time.Now()
	}
	if s.Step%every == 0 || s.Step == s.StepsPerEpoch {
		fmt.Fprintf(l.w, "  epoch %d/%d  step %d/%d  loss %.4f  %.1fs\n",
			s.Epoch+1, l.epochs, s.Step, s.StepsPerEpoch, s.Loss, time.Since(l.start).Seconds())
	}
}

func (l *lineProgress) done() { l.start = time.Time{} }
