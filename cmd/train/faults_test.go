package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/run/trainer"
)

// faultsVar lists the faults a rank of the tests' jobs injects into
// itself, separated by ";":
//
//	kill:RANK:STEP:RESTART   rank RANK kills itself (SIGKILL, as kill -9) after global step STEP
//	killafter:RANK:STEP:US   rank RANK kills itself US microseconds after global step STEP
//	                         (inside a later step, as a kill at a random moment), first attempt
//	startup:RANK:RESTART     rank RANK exits with status 3 before training
//	tear:STEP:RESTART        rank 0 cuts the checkpoint written at STEP to half its size
//	                         (both names: a write torn by a crash), then kills itself
//	stop:RANK:STEP:MS        rank RANK stops itself (SIGSTOP) after global step STEP; a
//	                         process it starts first continues it (SIGCONT) after MS
//	                         milliseconds (0: never), in the first attempt only
//	slow:RANK:MS             rank RANK sleeps MS milliseconds after each of its steps
//	                         (a straggler), in every attempt
//
// RESTART is the attempt (RINGDDP_RESTART: 0 first) the fault happens in,
// or * for every attempt.
const faultsVar = "RINGDDP_TEST_FAULTS"

// stoppedAtVar, when set, is a file where a stop fault writes the time it
// stops (Unix nanoseconds).
const stoppedAtVar = "RINGDDP_TEST_STOPPED_AT"

// testFaults is runEnv.adjust for the faults getenv's RINGDDP_TEST_FAULTS
// asks for in this rank and attempt (nil when none).
func testFaults(getenv func(string) string) func(*trainer.Config) {
	spec := getenv(faultsVar)
	if spec == "" {
		return nil
	}
	rank, _ := strconv.Atoi(getenv("RANK"))
	if name := getenv(launch.EnvJoinName); name != "" {
		rank, _ = strconv.Atoi(name) // a joining rank: its job-wide name
	}
	restart := getenv(launch.EnvRestart)
	if restart == "" {
		restart = "0"
	}
	now := func(when string) bool { return when == "*" || when == restart }
	wrongSecret(spec, rank) // before the flags are read
	return func(cfg *trainer.Config) {
		for _, f := range strings.Split(spec, ";") {
			p := strings.Split(f, ":")
			switch {
			case p[0] == "startup" && len(p) == 3 && p[1] == strconv.Itoa(rank) && now(p[2]):
				fmt.Fprintf(os.Stderr, "rank %d: failing at start-up on purpose\n", rank)
				os.Exit(3)
			case p[0] == "kill" && len(p) == 4 && p[1] == strconv.Itoa(rank) && now(p[3]):
				step, _ := strconv.ParseInt(p[2], 10, 64)
				cfg.OnRankStep = func(_ int, s trainer.StepInfo) {
					if s.GlobalStep == step {
						_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
					}
				}
			case p[0] == "killafter" && len(p) == 4 && p[1] == strconv.Itoa(rank) && now("0"):
				step, _ := strconv.ParseInt(p[2], 10, 64)
				us, _ := strconv.Atoi(p[3])
				cfg.OnRankStep = func(_ int, s trainer.StepInfo) {
					if s.GlobalStep == step {
						time.AfterFunc(time.Duration(us)*time.Microsecond, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
					}
				}
			case p[0] == "stop" && len(p) == 4 && p[1] == strconv.Itoa(rank) && now("0"):
				step, _ := strconv.ParseInt(p[2], 10, 64)
				ms, _ := strconv.Atoi(p[3])
				cfg.OnRankStep = func(_ int, s trainer.StepInfo) {
					if s.GlobalStep != step {
						return
					}
					if path := getenv(stoppedAtVar); path != "" {
						_ = os.WriteFile(path, []byte(strconv.FormatInt(time.Now().UnixNano(), 10)), 0o644)
					}
					if ms > 0 {
						script := fmt.Sprintf("sleep %g; kill -CONT %d", float64(ms)/1000, os.Getpid())
						_ = exec.Command("sh", "-c", script).Start()
					}
					_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				}
			case p[0] == "slow" && len(p) == 3 && p[1] == strconv.Itoa(rank):
				ms, _ := strconv.Atoi(p[2])
				slow := rank
				cfg.OnRankStep = func(r int, _ trainer.StepInfo) {
					if r == slow { // in-process, every rank calls it
						time.Sleep(time.Duration(ms) * time.Millisecond)
					}
				}
			case healFault(p, rank, cfg):
			case shmMapsFault(p, rank, cfg):
			case p[0] == "tear" && len(p) == 3 && rank == 0 && now(p[2]):
				step, _ := strconv.ParseInt(p[1], 10, 64)
				cfg.OnCheckpoint = func(c trainer.Checkpointed) {
					if c.Info.GlobalStep != step {
						return
					}
					for _, path := range []string{c.Path, c.Stamped} {
						if st, err := os.Stat(path); err == nil {
							_ = os.Truncate(path, st.Size()/2)
						}
					}
					_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
			}
		}
	}
}
