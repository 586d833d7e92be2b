package transport

import (
	"fmt"
	"time"
)

// Stall is a stall notice: rank Rank, in the collective whose messages
// carry header Call, saw no progress for After while it waited for rank
// Peer (What: "send", its message taken; "recv", a message from it;
// "exchange", either; "barrier", its arrival; "expose", its buffer
// lent) and is giving up. A transport that carries
// notices delivers one to every peer without failing anything, so that
// the ranks which give up can follow who waited for whom to the rank at
// the end of the chain, the one that stopped.
type Stall struct {
	Rank, Peer int
	What       string
	After      time.Duration
	Call       Header
}

// StallWhatCode is What's wire code (1 "send", 2 "recv", 3 "barrier",
// 4 "expose", 5 "exchange"), 0 for a value no peer would send.
func StallWhatCode(what string) uint8 {
	switch what {
	case "send":
		return 1
	case "recv":
		return 2
	case "barrier":
		return 3
	case "expose":
		return 4
	case "exchange":
		return 5
	}
	return 0
}

// StallWhat is the What a wire code stands for, and false for an unknown
// code.
func StallWhat(code uint8) (string, bool) {
	switch code {
	case 1:
		return "send", true
	case 2:
		return "recv", true
	case 3:
		return "barrier", true
	case 4:
		return "expose", true
	case 5:
		return "exchange", true
	}
	return "", false
}

// MaxStallAfter bounds a notice's After: a year, far beyond any timeout.
const MaxStallAfter = 365 * 24 * time.Hour

// Check validates a notice that arrived from rank from of a world of size
// ranks: it must be from's own, name another rank in range, say what it
// waited for and have waited between 0 and MaxStallAfter.
func (s *Stall) Check(from, size int) error {
	switch {
	case s.Rank != from:
		return fmt.Errorf("stall notice from rank %d speaks for rank %d", from, s.Rank)
	case s.Peer < 0 || s.Peer >= size || s.Peer == s.Rank:
		return fmt.Errorf("stall notice from rank %d names rank %d of %d", from, s.Peer, size)
	case StallWhatCode(s.What) == 0:
		return fmt.Errorf("stall notice from rank %d waits for %q", from, s.What)
	case s.After < 0 || s.After > MaxStallAfter:
		return fmt.Errorf("stall notice from rank %d waited %v", from, s.After)
	}
	return nil
}

func (s *Stall) String() string {
	return fmt.Sprintf("rank %d waited %v for rank %d (%s) in %v", s.Rank, s.After, s.Peer, s.What, s.Call)
}
