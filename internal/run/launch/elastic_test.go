package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
)

// helperElastic is the elastic helper rank: it reports "start 0", then
// runs 5 all-reduce steps, reporting each on the status pipe.
// RINGDDP_HELPER_STEP_SLEEP (a duration) pauses after each step, and then
// every rank also prints "helper rank R: step S done" on its stdout once
// the step is done, for tests that act on a step rather than a time.
// RINGDDP_HELPER_FAILS lists faults "RESTART/RANK/STEP" separated by ";":
// in attempt RESTART (RINGDDP_RESTART), rank RANK kills itself (SIGKILL)
// after step STEP, or exits with status 3 before connecting when STEP is
// -1.
func helperElastic() int {
	restart, rank := os.Getenv(EnvRestart), os.Getenv("RANK")
	failAt := -2
	for _, f := range strings.Split(os.Getenv("RINGDDP_HELPER_FAILS"), ";") {
		p := strings.Split(f, "/")
		if len(p) == 3 && (p[0] == restart || p[0] == "*") && p[1] == rank {
			failAt, _ = strconv.Atoi(p[2])
		}
	}
	if failAt == -1 {
		fmt.Fprintln(os.Stderr, "failing at start-up on purpose")
		return 3
	}
	status, err := OpenStatus(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	pause, _ := time.ParseDuration(os.Getenv("RINGDDP_HELPER_STEP_SLEEP"))
	ctx := context.Background()
	conn, env, err := Connect(ctx, Options{Timeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	g, err := allreduce.NewGroup(conn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer g.Close()
	if env.Rank == 0 {
		status.Started(0)
	}
	buf := make([]float32, 1000)
	for step := 1; step <= 5; step++ {
		if err := allreduce.AllReduce(ctx, g, buf, allreduce.Sum); err != nil {
			fmt.Fprintf(os.Stderr, "helper rank %d: %v\n", env.Rank, err)
			return 1
		}
		if env.Rank == 0 {
			status.Stepped(int64(step))
		}
		if step == failAt {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		if pause > 0 {
			fmt.Printf("helper rank %d: step %d done\n", env.Rank, step)
		}
		time.Sleep(pause)
	}
	if err := allreduce.Barrier(ctx, g); err != nil {
		return 1
	}
	return 0
}

// elasticConfig is a launcher Config of n elastic helper ranks with the
// faults fails, whose Prepare records the attempts it is asked for and
// restarts on as many ranks as allowed, "resuming" from step 1.
func elasticConfig(n, maxRestarts, minRanks int, fails string) (Config, *[]Attempt, *[]Restart, *lockedBuffer) {
	cfg, _, stderr := helperConfig(n, "elastic", "RINGDDP_HELPER_FAILS="+fails)
	cfg.Grace = time.Second
	var attempts []Attempt
	var restarts []Restart
	cfg.Elastic = &Elastic{
		MaxRestarts: maxRestarts, MinRanks: minRanks, Backoff: 50 * time.Millisecond,
		Prepare: func(_ context.Context, a Attempt) (Resume, error) {
			attempts = append(attempts, a)
			return Resume{Ranks: a.MaxRanks, Args: cfg.Args, Step: 1, From: "ck"}, nil
		},
		OnRestart: func(_ io.Writer, r Restart) { restarts = append(restarts, r) },
	}
	return cfg, &attempts, &restarts, stderr
}

// A rank killed in training is restarted on as many ranks; one that then
// fails at start-up is dropped (MinRanks 2); every restart is reported
// with the step it failed at and when it trained again.
func TestElasticRestart(t *testing.T) {
	cfg, attempts, restarts, stderr := elasticConfig(3, 3, 2, "0/2/3;1/0/-1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Run(ctx, cfg); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, stderr)
	}
	if len(*attempts) != 2 || len(*restarts) != 2 {
		t.Fatalf("%d restarts prepared, %d reported, want 2 and 2\nstderr:\n%s", len(*attempts), len(*restarts), stderr)
	}
	a1, a2 := (*attempts)[0], (*attempts)[1]
	// Rank 2 dies once its step 3 is done; rank 0 may or may not have got
	// the last of rank 2's data by then.
	if f := a1.Failure; a1.MaxRanks != 3 || f.Exit.Rank != 2 || f.AtStartup || f.Step < 2 || f.Step > 3 || f.StartStep != 0 {
		t.Errorf("first restart: %+v, want rank 2's failure at step 2 or 3 and 3 ranks", a1)
	}
	if a2.MaxRanks != 2 || a2.MinRanks != 2 || a2.Failure.Exit.Rank != 0 || !a2.Failure.AtStartup {
		t.Errorf("second restart: %+v, want rank 0's start-up failure and 2 ranks", a2)
	}
	r1, r2 := (*restarts)[0], (*restarts)[1]
	if r1.StepsLost != r1.Failure.Step-1 || r1.TrainingAgain != 0 {
		t.Errorf("first restart: %d steps lost, training again after %v; want %d and never", r1.StepsLost, r1.TrainingAgain, r1.Failure.Step-1)
	}
	if r2.TrainingAgain <= 0 || r2.Resume.Ranks != 2 || r2.StepsLost != 0 {
		t.Errorf("second restart: %+v, want training again on 2 ranks", r2)
	}
	if !strings.Contains(stderr.String(), "launch: restart 2 of at most 3 after rank 0 (pid") {
		t.Errorf("stderr does not report the restart:\n%s", stderr)
	}
}

// A rank that fails at start-up every time ends the job once the restarts
// are spent, with every failure named.
func TestElasticRestartsExhausted(t *testing.T) {
	cfg, attempts, _, stderr := elasticConfig(2, 2, 0, "*/1/-1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := Run(ctx, cfg)
	var ex *RestartsExhaustedError
	if !errors.As(err, &ex) || len(ex.Failures) != 3 {
		t.Fatalf("Run = %v, want a *RestartsExhaustedError with 3 failures\nstderr:\n%s", err, stderr)
	}
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Rank != 1 {
		t.Errorf("the error's *ExitError is %v, want rank 1's", ee)
	}
	re := regexp.MustCompile(`attempt \d \(2 ranks\): rank 1 \(pid \d+\) exited with status 3 at start-up`)
	if got := len(re.FindAllString(err.Error(), -1)); got != 3 {
		t.Errorf("error names %d start-up failures, want 3: %v", got, err)
	}
	if len(*attempts) != 2 {
		t.Errorf("%d restarts prepared, want 2", len(*attempts))
	}
	for _, a := range *attempts {
		if a.MaxRanks != 2 {
			t.Errorf("restart %d on up to %d ranks: MinRanks (default: all) forbids shrinking", a.Restart, a.MaxRanks)
		}
	}
}

func TestElasticConfigErrors(t *testing.T) {
	cfg, _, _, _ := elasticConfig(2, 1, 0, "")
	cfg.Nnodes = 2
	if err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "need the master's host:port") {
		t.Errorf("two nodes without a master: %v", err)
	}
	cfg, _, _, _ = elasticConfig(2, 1, 3, "")
	if err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "min ranks 3: want 1..2") {
		t.Errorf("min ranks 3 of 2: %v", err)
	}
}
