package launch

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// Ranks under a foreign launcher share the cores as under ours, unless
// GOMAXPROCS is set or the host's rank count is unknown.
func TestShareCores(t *testing.T) {
	old := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(old)
	for _, tc := range []struct {
		procs, local int
		gomaxprocs   string
		want         int
	}{
		{8, 4, "", 2},
		{2, 4, "", 1},
		{8, 3, "", 2},
		{8, 4, "8", 8},
		{8, 1, "", 8},
		{8, 0, "", 8},
	} {
		runtime.GOMAXPROCS(tc.procs)
		ret := ShareCores(rendezvous.Env{WorldSize: 8, LocalWorldSize: tc.local}, func(k string) string {
			if k == "GOMAXPROCS" {
				return tc.gomaxprocs
			}
			return ""
		})
		if got := runtime.GOMAXPROCS(0); got != tc.want || ret != tc.want {
			t.Errorf("%d procs, %d local ranks, GOMAXPROCS=%q: got %d (returned %d), want %d", tc.procs, tc.local, tc.gomaxprocs, got, ret, tc.want)
		}
	}
}

func TestSpinEnv(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "off": -1, "0": -1, "500us": 500 * time.Microsecond, "-1s": -time.Second, "5ms": 5 * time.Millisecond} {
		got, err := spinEnv(func(k string) string {
			if k == EnvSpin {
				return v
			}
			return ""
		})
		if err != nil || got != want {
			t.Errorf("%s=%q: got %v, %v; want %v", EnvSpin, v, got, err, want)
		}
	}
	if _, err := spinEnv(func(string) string { return "fast" }); err == nil || !strings.Contains(err.Error(), EnvSpin) {
		t.Errorf("a malformed %s: got %v, want an error naming it", EnvSpin, err)
	}
}
