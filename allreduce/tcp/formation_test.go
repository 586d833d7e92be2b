package tcp

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// logLines captures what a rank prints while its mesh forms, with when
// each line came.
type logLines struct {
	mu    sync.Mutex
	start time.Time
	lines []string
	at    []time.Duration
}

func newLogLines() *logLines { return &logLines{start: time.Now()} }

func (l *logLines) log(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	l.at = append(l.at, time.Since(l.start))
}

// find returns the first line containing every text, and when it came.
func (l *logLines) find(texts ...string) (string, time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
next:
	for i, line := range l.lines {
		for _, s := range texts {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		return line, l.at[i], true
	}
	return "", 0, false
}

func (l *logLines) dump(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, line := range l.lines {
		t.Logf("%6v  %s", l.at[i].Round(time.Millisecond), line)
	}
}

// TestWrongSecretReportedAtOnce: rank 1 has the wrong secret. Rank 0,
// waiting for it, prints the refusal as it happens (from where, why),
// then every progress interval whom it still waits for, and at the join
// timeout fails with an error that counts the connections turned away,
// why and from where; rank 1 fails at once.
func TestWrongSecretReportedAtOnce(t *testing.T) {
	store := rendezvous.NewMemStore()
	a, b := testConfig(0, 2, store), testConfig(1, 2, store)
	b.Secret = []byte("another secret, also long")
	a.ConnectTimeout = 1500 * time.Millisecond
	a.progressEvery = 400 * time.Millisecond
	logs := newLogLines()
	a.Log = logs.log
	b.Log = func(string) {}
	conns, errs := dialConfigs([]Config{a, b})
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	logs.dump(t)
	line, at, ok := logs.find("tcp: rank 0: turned away a connection from 127.0.0.1:", "authentication failed (wrong secret?)", "claiming rank 1")
	if !ok || at > time.Second {
		t.Errorf("no line about the refusal within a second (got %q at %v)", line, at)
	}
	if _, _, ok := logs.find("tcp: rank 0: still waiting for rank(s) 1 (", "of 1.5s)", "rank(s) 1 have not connected (1 connection(s) turned away so far)"); !ok {
		t.Error("no progress line naming the missing rank")
	}
	for _, want := range []string{"no connection with rank(s) 1 after 1.5s", "turned away 1 connection(s)", "1 failed the proof",
		"from 127.0.0.1 (1)", "claiming rank 1", "authentication failed"} {
		if errs[0] == nil || !strings.Contains(errs[0].Error(), want) {
			t.Errorf("rank 0: %v, want it to say %q", errs[0], want)
		}
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "authentication failed") {
		t.Errorf("rank 1: %v, want an authentication failure", errs[1])
	}
}

// TestDialerReportsWhatItWaitsFor: a rank waiting for a lower rank says
// whether that rank has published its address, and once it has, what
// dialing it gives (here: nothing listens there).
func TestDialerReportsWhatItWaitsFor(t *testing.T) {
	store := rendezvous.NewMemStore()
	cfg := testConfig(1, 2, store)
	cfg.ConnectTimeout = 1200 * time.Millisecond
	cfg.progressEvery = 300 * time.Millisecond
	logs := newLogLines()
	cfg.Log = logs.log
	// An address where nothing listens, published after a while.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	go func() {
		time.Sleep(500 * time.Millisecond)
		_ = store.Set(context.Background(), addrKey("test", 0), []byte(dead))
	}()
	c, err := Dial(context.Background(), cfg)
	if c != nil {
		c.Close()
	}
	logs.dump(t)
	if _, _, ok := logs.find("tcp: rank 1: still waiting for rank(s) 0 (", "rank 0 has not published its address yet"); !ok {
		t.Error("no progress line saying rank 0 has not published its address")
	}
	if _, _, ok := logs.find("tcp: rank 1: still waiting for rank(s) 0 (", "rank 0 at "+dead+": dial tcp", "connection refused"); !ok {
		t.Error("no progress line saying what dialing rank 0 gives")
	}
	if err == nil || !strings.Contains(err.Error(), "rank 0") {
		t.Errorf("Dial: %v, want a failure naming rank 0", err)
	}
}
