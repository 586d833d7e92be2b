package launch

import (
	"runtime"
	"testing"

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
		shareCores(rendezvous.Env{WorldSize: 8, LocalWorldSize: tc.local}, func(k string) string {
			if k == "GOMAXPROCS" {
				return tc.gomaxprocs
			}
			return ""
		})
		if got := runtime.GOMAXPROCS(0); got != tc.want {
			t.Errorf("%d procs, %d local ranks, GOMAXPROCS=%q: got %d, want %d", tc.procs, tc.local, tc.gomaxprocs, got, tc.want)
		}
	}
}
