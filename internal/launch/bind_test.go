package launch

import (
	"slices"
	"strings"
	"testing"

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
