package launch

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
)

// outputs are the launcher's stdout and stderr, shared by every rank's
// forwarder (and the elastic reports) for as long as Run runs.
type outputs struct {
	out, errOut *syncWriter
}

func newOutputs(cfg Config) outputs {
	w := outputs{out: &syncWriter{w: cfg.Stdout}, errOut: &syncWriter{w: cfg.Stderr}}
	if cfg.Stderr == cfg.Stdout {
		w.errOut = w.out
	}
	return w
}

// forward sends a rank's output to w, each line prefixed "[rank N] ":
// rank 0's stdout unprefixed unless cfg.PrefixRank0, and straight to
// cfg.Stdout when that is a file. tap sees every line of its stderr. It
// returns the writers to flush once the rank has exited. With lead set
// (survivors continue: the job's rank 0 changes when it is lost) the
// stdout of the rank lead names, by its rank at the start, is unprefixed
// instead, line by line.
func (w outputs) forward(cmd *exec.Cmd, cfg Config, rank int, tap func([]byte), lead *atomic.Int64) []*lineWriter {
	prefix := fmt.Sprintf("[rank %d] ", rank)
	var flush []*lineWriter
	if lead != nil && !cfg.PrefixRank0 {
		lw := &lineWriter{dst: w.out, prefix: prefix, lead: lead, rank: rank}
		cmd.Stdout, flush = lw, append(flush, lw)
	} else if rank == 0 && !cfg.PrefixRank0 {
		if f, ok := cfg.Stdout.(*os.File); ok {
			cmd.Stdout = f // its own descriptor: a terminal stays a terminal
		} else {
			lw := &lineWriter{dst: w.out}
			cmd.Stdout, flush = lw, append(flush, lw)
		}
	} else {
		lw := &lineWriter{dst: w.out, prefix: prefix}
		cmd.Stdout, flush = lw, append(flush, lw)
	}
	lw := &lineWriter{dst: w.errOut, prefix: prefix, tap: tap}
	cmd.Stderr, flush = lw, append(flush, lw)
	return flush
}

// syncWriter serialises writes from several ranks' forwarders.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// maxLine is the longest partial line a lineWriter holds before writing it
// out without waiting for its end.
const maxLine = 1 << 20

// lineWriter forwards whole lines, each with a prefix, to dst. os/exec
// calls Write from one goroutine per stream; flush writes a last line
// that had no newline once the rank has exited.
type lineWriter struct {
	dst    io.Writer
	prefix string
	tap    func(line []byte) // if set, sees every whole line (without the prefix)
	lead   *atomic.Int64     // if set, prefix only when it does not hold rank
	rank   int
	mu     sync.Mutex
	buf    []byte
	cont   bool // buf continues a line already partly written
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.buf = append(l.buf, p...)
			if len(l.buf) >= maxLine {
				l.emit(false)
			}
			break
		}
		l.buf = append(l.buf, p[:i+1]...)
		p = p[i+1:]
		l.emit(true)
	}
	return n, nil
}

// emit writes buf as (part of) a line; whole says it ends the line.
func (l *lineWriter) emit(whole bool) {
	var line []byte
	if !l.cont && (l.lead == nil || l.lead.Load() != int64(l.rank)) {
		line = append(line, l.prefix...)
	}
	line = append(line, l.buf...)
	_, _ = l.dst.Write(line) // a failing destination must not stop the rank
	if whole && !l.cont && l.tap != nil {
		l.tap(l.buf)
	}
	l.buf = l.buf[:0]
	l.cont = !whole
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 || l.cont {
		l.buf = append(l.buf, '\n')
		l.emit(true)
	}
}
