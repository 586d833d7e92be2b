package testbed

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// helperVar makes the test binary a helper run on a host: "serve ADDR N"
// (accept connections on ADDR, write the host name and N bytes to each)
// or "fetch ADDR S" (connect, retrying for S seconds, and print what
// arrived's first line and length).
const helperVar = "TESTBED_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperVar); h != "" {
		if err := helper(strings.Fields(h)); err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func helper(args []string) error {
	switch args[0] {
	case "serve":
		var n int
		fmt.Sscan(args[2], &n)
		ln, err := net.Listen("tcp", args[1])
		if err != nil {
			return err
		}
		name, _ := os.Hostname()
		for {
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			go func() {
				defer c.Close()
				fmt.Fprintln(c, name)
				_, _ = c.Write(make([]byte, n))
			}()
		}
	case "fetch":
		var secs float64
		fmt.Sscan(args[2], &secs)
		deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
		for {
			c, err := net.DialTimeout("tcp", args[1], time.Second)
			if err != nil {
				if time.Now().After(deadline) {
					return err
				}
				time.Sleep(20 * time.Millisecond)
				continue
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			b, err := io.ReadAll(c)
			c.Close()
			if err != nil {
				return err
			}
			first, _, _ := bytes.Cut(b, []byte("\n"))
			fmt.Printf("%s %d\n", first, len(b))
			return nil
		}
	}
	return fmt.Errorf("unknown helper %q", args)
}

// start runs the test binary as a helper on h; the test's end kills it.
func start(t *testing.T, h *Host, args string) *exec.Cmd {
	t.Helper()
	cmd := h.Command(context.Background(), os.Args[0])
	cmd.Env = append(os.Environ(), helperVar+"="+args)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// fetch runs the fetch helper on h, trying to connect for 5 s, and
// returns its output.
func fetch(t *testing.T, h *Host, addr string) (string, error) {
	return fetchFor(t, h, addr, "5")
}

// fetchFor is fetch trying for secs seconds.
func fetchFor(t *testing.T, h *Host, addr, secs string) (string, error) {
	t.Helper()
	cmd := h.Command(context.Background(), os.Args[0])
	cmd.Env = append(os.Environ(), helperVar+"=fetch "+addr+" "+secs)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"1gbit": 1e9, "100mbit": 1e8, "2.5Mbit": 2.5e6, "64kbit": 64e3, "8000bit": 8000} {
		got, err := ParseRate(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "1g", "gbit", "xgbit", "1kbitz", "-1gbit", "NaNgbit", "1bit", "2000gbit"} {
		_, err := ParseRate(in)
		require.Error(t, err, in)
	}
}

// Hosts reach each other by address, each under its own host name, and
// host 0 cannot reach the machine's own loopback services (its own
// namespace).
// The token bucket holds Config.Burst of the rate (5 ms by default), never
// less than 16 KiB.
func TestBurstBytes(t *testing.T) {
	require.Equal(t, 625000, burstBytes(1e9, 0))
	require.Equal(t, 125000, burstBytes(1e9, time.Millisecond))
	require.Equal(t, 1250000, burstBytes(1e9, 10*time.Millisecond))
	require.Equal(t, 16<<10, burstBytes(1e6, 0), "5 ms of 1 Mbit/s is 625 bytes: the floor")
}

func TestHostsTalk(t *testing.T) {
	b := New(t, Config{Hosts: 3})
	start(t, b.Host(2), "serve "+b.Host(2).Addr()+":7000 10")
	for _, from := range []int{0, 1} {
		out, err := fetch(t, b.Host(from), b.Host(2).Addr()+":7000")
		require.NoError(t, err, out)
		require.Equal(t, "h2 13", out, "host %d fetching from host 2", from)
	}
	require.NotEqual(t, b.Host(0).Namespace(), b.Host(1).Namespace())
}

// With Config.Rate, a transfer between two hosts takes at least its
// size over the rate.
func TestRateShapesTheLink(t *testing.T) {
	const size = 1 << 20
	b := New(t, Config{Hosts: 2, Rate: "40mbit"})
	start(t, b.Host(1), fmt.Sprintf("serve %s:7000 %d", b.Host(1).Addr(), size))
	_, err := fetch(t, b.Host(0), b.Host(1).Addr()+":7000") // connected: timing from here
	require.NoError(t, err)
	t0 := time.Now()
	out, err := fetch(t, b.Host(0), b.Host(1).Addr()+":7000")
	require.NoError(t, err, out)
	floor := time.Duration(float64(size*8) / 40e6 * float64(time.Second)) // 210 ms
	// The bucket starts full: one burst (5 ms of the rate) passes at once.
	require.Greater(t, time.Since(t0), floor*8/10, "1 MiB at 40 Mbit/s")
}

// KillHost ends every process on the host, those its processes started
// included, and nothing on the other hosts.
func TestKillHost(t *testing.T) {
	b := New(t, Config{Hosts: 2})
	victim := b.Host(0).Command(context.Background(), "sh", "-c", "sleep 60 & sleep 60 & wait")
	require.NoError(t, victim.Start())
	done := make(chan error, 1)
	go func() { done <- victim.Wait() }()
	other := start(t, b.Host(1), "serve :7000 0")
	require.Eventually(t, func() bool {
		pids, err := b.Host(0).Pids()
		return err == nil && len(pids) == 3
	}, 5*time.Second, 10*time.Millisecond, "sh and its two sleeps on host 0")
	t0 := time.Now()
	require.NoError(t, b.KillHost(0))
	select {
	case err := <-done:
		require.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the command on the killed host still runs")
	}
	pids, err := b.Host(0).Pids()
	require.NoError(t, err)
	require.Empty(t, pids)
	require.Less(t, time.Since(t0), 2*time.Second)
	require.Nil(t, other.ProcessState, "host 1's process ended")
}

// CutLink stops traffic to the host both ways; RestoreLink brings it
// back.
func TestCutLink(t *testing.T) {
	b := New(t, Config{Hosts: 2})
	addr := b.Host(1).Addr() + ":7000"
	start(t, b.Host(1), "serve "+addr+" 10")
	_, err := fetch(t, b.Host(0), addr)
	require.NoError(t, err)
	require.NoError(t, b.CutLink(1))
	out, err := fetchFor(t, b.Host(0), addr, "1")
	require.Error(t, err, "fetched across a cut link: %s", out)
	require.NoError(t, b.RestoreLink(1))
	out, err = fetch(t, b.Host(0), addr)
	require.NoError(t, err, out)
}

// A bed leaves nothing behind: its namespaces and processes are gone
// when its test ends, failed or not.
func TestTeardownLeavesNothing(t *testing.T) {
	var names []string
	var pid int
	t.Run("bed", func(t *testing.T) {
		b := New(t, Config{Hosts: 2, Rate: "1gbit"})
		for _, h := range b.Hosts() {
			names = append(names, h.Namespace())
		}
		names = append(names, b.sw)
		cmd := b.Host(1).Command(context.Background(), "sleep", "60")
		require.NoError(t, cmd.Start()) // never waited for by the test
		pid = cmd.Process.Pid
	})
	if pid == 0 {
		t.Skip("the bed was not built (its subtest skipped)")
	}
	for _, n := range names {
		_, err := os.Stat(filepath.Join(netnsDir, n))
		require.True(t, os.IsNotExist(err), "namespace %s left behind", n)
	}
	require.False(t, processAlive(pid) && !zombie(pid), "process %d left running", pid)
}

// zombie reports whether pid has exited and waits for its parent.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := bytes.Cut(b, []byte(") "))
	return bytes.HasPrefix(rest, []byte("Z"))
}

// New removes what an interrupted run left: the namespaces of a process
// that no longer runs, and the processes in them.
func TestNewSweepsLeftovers(t *testing.T) {
	if reason := Unavailable(); reason != "" {
		t.Skip(reason)
	}
	if testing.Short() {
		t.Skip("-short")
	}
	gone := exec.Command("true")
	require.NoError(t, gone.Run()) // its pid no longer runs
	name := fmt.Sprintf("%s%d-leftover-h0", Prefix, gone.Process.Pid)
	require.NoError(t, ip("netns", "add", name))
	t.Cleanup(func() { _ = removeNamespace(name) })
	sleeper := exec.Command("ip", "netns", "exec", name, "sleep", "60")
	require.NoError(t, sleeper.Start())
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	require.Eventually(t, func() bool {
		pids, err := nsPids(name)
		return err == nil && len(pids) == 1
	}, 5*time.Second, 10*time.Millisecond)

	New(t, Config{Hosts: 1})
	_, err := os.Stat(filepath.Join(netnsDir, name))
	require.True(t, os.IsNotExist(err), "leftover namespace %s not removed", name)
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("the leftover's process still runs")
	}
}

func TestLeftover(t *testing.T) {
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	dead := fmt.Sprintf("x-%d-ab", gone.Process.Pid)
	require.True(t, Leftover(dead, "x-"))
	require.False(t, Leftover(dead, "y-"), "another prefix")
	require.False(t, Leftover(fmt.Sprintf("x-%d-ab", os.Getpid()), "x-"), "this process")
	for _, name := range []string{"x-", "x--ab", "x-abc-1", "x-0-ab", "x--5-ab"} {
		require.False(t, Leftover(name, "x-"), name)
	}
}
