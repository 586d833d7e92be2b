package launch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// A rank removes RINGDDP_SECRET from its environment once connected:
// neither it nor a process it starts afterwards sees it.
func TestRankDropsSecret(t *testing.T) {
	t.Parallel()
	cfg, stdout, stderr := helperConfig(2, "secretgone")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Run(ctx, cfg); err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	for r := range 2 {
		want := fmt.Sprintf("rank %d: child sees %s: false: %s in own env: false", r, EnvSecret, EnvSecret)
		if r > 0 {
			want = fmt.Sprintf("[rank %d] %s", r, want)
		}
		if !slices.Contains(lines(stdout.String()), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}
