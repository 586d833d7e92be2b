package tapevm

import "testing"

type counter struct{ resets int }

func (c *counter) Reset() { c.resets++ }

// A machine that is not gorgonia's tape machine is Reset, not rewound.
func TestRewindFallsBackToReset(t *testing.T) {
	c := &counter{}
	if Rewind(c) || c.resets != 1 {
		t.Fatalf("Rewind(other machine) = rewound, resets %d; want Reset once", c.resets)
	}
}
