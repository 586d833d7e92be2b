package launch

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

func TestBindShare(t *testing.T) {
	for _, tc := range []struct {
		rank, size int
		allowed    []int
		want       []int
	}{
		{0, 2, []int{0, 1}, []int{0}},
		{1, 2, []int{0, 1}, []int{1}},
		{1, 2, []int{0, 1, 2, 3, 4}, []int{2, 3}}, // 5 processors, 2 ranks: blocks of 2
		{2, 3, []int{4, 5, 6, 7, 8, 9}, []int{8, 9}},
		{3, 4, []int{0, 1}, []int{1}}, // oversubscribed: round robin
		{2, 4, []int{0, 1}, []int{0}},
		{4, 5, []int{3, 7}, []int{3}},
		{0, 1, []int{0, 1, 2}, []int{0, 1, 2}},
		{0, 2, nil, nil},
		{2, 2, []int{0, 1}, nil},
		{-1, 2, []int{0, 1}, nil},
	} {
		if got := BindShare(tc.rank, tc.size, tc.allowed); !slices.Equal(got, tc.want) {
			t.Errorf("BindShare(%d, %d, %v) = %v, want %v", tc.rank, tc.size, tc.allowed, got, tc.want)
		}
	}
}

func TestBindValues(t *testing.T) {
	env := rendezvous.Env{LocalRank: 0, LocalWorldSize: 2}
	for _, v := range []string{"", "none"} {
		if cpus, err := Bind(env, func(string) string { return v }); err != nil || cpus != nil {
			t.Errorf("%s=%q: %v, %v; want nothing done", EnvBind, v, cpus, err)
		}
	}
	_, err := Bind(env, func(string) string { return "socket" })
	if err == nil || !strings.Contains(err.Error(), "RINGDDP_BIND=socket") {
		t.Errorf("RINGDDP_BIND=socket: %v, want an error naming it", err)
	}
	// One rank on the host: nothing to share.
	if cpus, err := Bind(rendezvous.Env{LocalWorldSize: 1}, func(string) string { return "core" }); err != nil || cpus != nil {
		t.Errorf("one rank: %v, %v; want nothing done", cpus, err)
	}
}

// TestLauncherRefusesUnknownBinding: the launcher checks RINGDDP_BIND
// before it starts any rank, and says what is wrong.
func TestLauncherRefusesUnknownBinding(t *testing.T) {
	t.Setenv(EnvBind, "socket")
	cfg, stdout, _ := helperConfig(2, "allreduce")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "RINGDDP_BIND=socket: unknown binding") {
		t.Fatalf("Run: %v, want the unknown binding named", err)
	}
	if stdout.String() != "" {
		t.Errorf("a rank ran: %q", stdout.String())
	}
}
