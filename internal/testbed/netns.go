package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// netnsDir is where ip netns keeps its named namespaces.
const netnsDir = "/run/netns"

// run runs a command and returns its error with its output.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// ip runs the ip command.
func ip(args ...string) error { return run("ip", args...) }

// ipAll runs the ip command once per step, stopping at the first error.
func ipAll(steps [][]string) error {
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// newUTS makes a command start in a UTS namespace of its own (a host
// name of its own), killed if the test process dies before it (a killed
// test binary leaves no command running; what the command started goes
// with it where it, like the launchers, does the same).
func newUTS() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS, Pdeathsig: syscall.SIGKILL}
}

// nsPids returns the processes whose network namespace is the named one,
// found by the namespace's inode in /proc/PID/ns/net ("net:[INODE]").
func nsPids(name string) ([]int, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(netnsDir, name), &st); err != nil {
		return nil, fmt.Errorf("namespace %s: %w", name, err)
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// A process that exited meanwhile has no link to read: skip it.
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && link == want {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// killAll sends SIGKILL to every process in the namespace until none is
// left (processes may start others meanwhile), at most for d.
func killAll(name string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		pids, err := nsPids(name)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s: processes %v still running %v after SIGKILL", name, pids, d)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// removeNamespace kills what runs in the namespace and deletes it, which
// deletes its interfaces (and so the far ends of its veth pairs). A
// namespace that is already gone is no error.
func removeNamespace(name string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := killAll(name, 10*time.Second); err != nil {
		return err
	}
	return ip("netns", "del", name)
}

// sweep deletes the namespaces of beds whose process no longer runs
// ("rddptb-<pid>-..." with no process pid): what an interrupted test run
// (SIGKILL, a crash, a timeout) left. Errors are logged, not fatal: a
// leftover does not stop a new bed, whose names differ.
func sweep(tb testing.TB) {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !Leftover(e.Name(), Prefix) {
			continue
		}
		if err := removeNamespace(e.Name()); err != nil {
			tb.Logf("testbed: removing a leftover namespace: %v", err)
		}
	}
}

// Leftover reports whether name is prefix<pid>-... for a pid that no
// longer runs: what a test process named with its pid left when it was
// killed before its cleanup.
func Leftover(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	pidText, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidText)
	return err == nil && pid > 0 && !processAlive(pid)
}

// processAlive reports whether process pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
