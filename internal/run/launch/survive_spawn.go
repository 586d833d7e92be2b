package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
)

// Starting joiners (survive_grow.go) while the job runs: job.wait owns the
// job's processes, so a joiner started by the coordinator is handed to it
// on added; once wait has collected every process (over closed) no joiner
// starts.

// setSpawn gives the coordinator its way to start joiners; it waits for it
// before starting the spares. A member node's survival (survive_nodes.go)
// has no coordinator of its own and starts no joiners.
func (s *survival) setSpawn(f spawnFunc) {
	s.spawn = f
	if s.spawnReady != nil {
		close(s.spawnReady)
	}
}

// spawner starts joiners as ranks of the attempt: the ranks' command and
// environment, local rank local's cores, EnvJoinName set, output forwarded
// as the ranks'. A joiner gets no status pipe (it never joins as rank 0).
func (j *job) spawner(cfg Config, w outputs, a attempt, base, vars []string, lead *atomic.Int64) spawnFunc {
	j.added, j.over = make(chan *proc), make(chan struct{})
	return func(name, local int) (int, error) {
		cmd := exec.Command(cfg.Path, a.args...)
		cmd.Env = append(rankEnv(cfg, base, vars, a.env, local), EnvJoinName+"="+strconv.Itoa(name))
		p := &proc{rank: name, cmd: cmd}
		flush := w.forward(cmd, cfg, name, p.lastLine, lead)
		cmd.SysProcAttr = sysProcAttr()
		cmd.WaitDelay = cfg.Grace
		select {
		case <-j.over:
			return 0, errors.New("the job has ended")
		default:
		}
		if err := cmd.Start(); err != nil {
			return 0, fmt.Errorf("starting %s: %w", cfg.Path, err)
		}
		select {
		case j.added <- p:
		case <-j.over:
			signalProc(cmd.Process, os.Kill)
			_ = cmd.Wait()
			return 0, errors.New("the job has ended")
		}
		go func() {
			err := cmd.Wait()
			for _, lw := range flush {
				lw.flush()
			}
			j.exits <- exit{p: p, err: err}
		}()
		return cmd.Process.Pid, nil
	}
}
