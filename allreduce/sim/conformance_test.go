package sim_test

import (
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/sim"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/allreduce/transport/transporttest"
)

func TestConformance(t *testing.T) {
	for _, timingOnly := range []bool{false, true} {
		name := "real"
		if timingOnly {
			// The suite's payloads are ordinary memory, which timing-only
			// mode still delivers.
			name = "timing-only"
		}
		t.Run(name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, n int) []transport.Conn {
				w := newWorld(t, sim.Config{
					Ranks:      n,
					LocalSize:  2,
					TimingOnly: timingOnly,
					Timeout:    5 * time.Second,
					Model:      cost.Model{Intra: cost.Link{Alpha: 1e-6, Beta: 1e-9}, Inter: cost.Link{Alpha: 1e-5, Beta: 1e-8}, Gamma: 1e-10},
				})
				return w.Endpoints()
			})
		})
	}
}

func TestCapabilities(t *testing.T) {
	w := newWorld(t, sim.Config{Ranks: 2})
	var c transport.Conn = w.Conn(0)
	if _, ok := c.(transport.Exchanger); !ok {
		t.Error("not an Exchanger")
	}
	if _, ok := c.(transport.Aborter); !ok {
		t.Error("not an Aborter")
	}
	if _, ok := c.(transport.PeerMemory); ok {
		t.Error("a PeerMemory: the simulator must model every byte as a message")
	}
}
