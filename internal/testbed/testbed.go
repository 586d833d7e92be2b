// Package testbed emulates several hosts on one Linux machine for tests:
// each host is a network namespace of its own, wired to a bridge, with an
// address, a host name and, optionally, a link shaped to a rate, so that
// the project's launchers run in them as on hosts of a cluster; and it
// injects the faults of a cluster (a host's processes killed, a link
// down).
//
// Vocabulary:
//
//   - bed: one test's set of hosts (New). Every name it creates starts
//     with its prefix, "rddptb-<pid>-<random>-", so that parallel tests,
//     parallel test processes and an interrupted earlier run never
//     collide.
//   - host i: the namespace <prefix>h<i>, with loopback up, one interface
//     eth0 at 10.77.0.<i+1>/24 and host name h<i> (in a UTS namespace of
//     each command's own). The addresses are the same in every bed: each
//     bed's network is closed (no interface of it is in the machine's own
//     namespace), so two beds cannot see each other.
//   - switch: the namespace <prefix>sw holding the bridge br0 and the far
//     end of every host's link, port h<i>. The machine's own network is
//     never touched.
//   - link i: the veth pair eth0 (in host i) – h<i> (in the switch). With
//     Config.Rate each end's egress goes through a token bucket (tc tbf)
//     of that rate: the link is shaped both ways.
//
// Building a bed (New):
//
//  1. sweep: delete the namespaces of beds whose process is gone (an
//     interrupted run), killing what still runs in them;
//  2. add the switch namespace and its bridge, then per host its
//     namespace, the veth pair created in the switch with its host end
//     moved into the host, the address, loopback and the shaping;
//  3. register the teardown with t.Cleanup: SIGKILL every process in
//     each namespace, wait until none is left, delete the namespaces
//     (which deletes their links). It runs whether the test passed or
//     not.
//
// A bed needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), the ip and tc
// commands of iproute2 and a kernel with network namespaces, veth,
// bridge and tbf; where any is missing New skips the test (t.Skip) saying
// what was missing. New also skips under -short.
package testbed

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Prefix starts the name of every namespace a bed creates.
const Prefix = "rddptb-"

// Subnet is the first three octets of every host's address: host i is
// Subnet.(i+1).
const Subnet = "10.77.0"

// MaxHosts is the most hosts a bed holds (addresses .1 to .250).
const MaxHosts = 250

// Config says what bed to build.
type Config struct {
	// Hosts is the number of hosts, 1..MaxHosts.
	Hosts int
	// Rate shapes every host's link, both ways, to this rate, in tc's
	// syntax ("1gbit", "100mbit", "500kbit"); "" leaves it unshaped.
	Rate string
	// Burst is the token bucket's size as a time at Rate: how long an
	// idle link saves up to send at once afterwards; 0 is 5 ms (at least
	// 16 KiB either way). A real link saves nothing: a smaller bucket
	// brings the bed closer to one, down to what the kernel's timer
	// allows the rate to be kept at.
	Burst time.Duration
}

// Bed is one test's hosts, bridge and links.
type Bed struct {
	tb     testing.TB
	prefix string
	sw     string // the switch's namespace
	hosts  []*Host
}

// Host is one emulated host.
type Host struct {
	bed   *Bed
	index int
	ns    string
}

// New builds the bed c describes, or skips tb (t.Skip) saying why it
// cannot run here, or fails tb when building it fails midway. Everything
// it builds is removed when tb ends (t.Cleanup).
func New(tb testing.TB, c Config) *Bed {
	tb.Helper()
	if c.Hosts < 1 || c.Hosts > MaxHosts {
		tb.Fatalf("testbed: %d hosts: want 1..%d", c.Hosts, MaxHosts)
	}
	burst := 0
	if c.Rate != "" {
		bits, err := ParseRate(c.Rate)
		if err != nil {
			tb.Fatalf("testbed: Config.Rate: %v", err)
		}
		burst = burstBytes(bits, c.Burst)
	}
	if reason := Unavailable(); reason != "" {
		tb.Skip("testbed: " + reason)
	}
	if testing.Short() {
		tb.Skip("testbed: skipped with -short (it builds network namespaces and runs processes in them)")
	}
	sweep(tb)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	b := &Bed{tb: tb, prefix: fmt.Sprintf("%s%d-%s-", Prefix, os.Getpid(), hex.EncodeToString(suffix))}
	b.sw = b.prefix + "sw"
	tb.Cleanup(b.teardown)
	if err := ip("netns", "add", b.sw); err != nil {
		tb.Skipf("testbed: cannot create a network namespace here: %v", err)
	}
	steps := [][]string{
		{"-n", b.sw, "link", "add", "br0", "type", "bridge"},
		{"-n", b.sw, "link", "set", "br0", "up"},
	}
	if err := ipAll(steps); err != nil {
		tb.Fatalf("testbed: the bridge: %v", err)
	}
	for i := range c.Hosts {
		h := &Host{bed: b, index: i, ns: fmt.Sprintf("%sh%d", b.prefix, i)}
		b.hosts = append(b.hosts, h)
		if err := h.build(c.Rate, burst); err != nil {
			tb.Fatalf("testbed: host %d: %v", i, err)
		}
	}
	return b
}

// build creates the host's namespace and link and shapes the link.
func (h *Host) build(rate string, burst int) error {
	sw, port := h.bed.sw, h.port()
	if err := ip("netns", "add", h.ns); err != nil {
		return err
	}
	steps := [][]string{
		{"-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"-n", sw, "link", "set", port, "master", "br0"},
		{"-n", sw, "link", "set", port, "up"},
		{"-n", h.ns, "addr", "add", h.Addr() + "/24", "dev", "eth0"},
		{"-n", h.ns, "link", "set", "eth0", "up"},
		{"-n", h.ns, "link", "set", "lo", "up"},
	}
	if err := ipAll(steps); err != nil {
		return err
	}
	if rate == "" {
		return nil
	}
	for _, end := range [][2]string{{h.ns, "eth0"}, {sw, port}} {
		if err := run("tc", "-n", end[0], "qdisc", "add", "dev", end[1], "root", "tbf",
			"rate", rate, "burst", fmt.Sprint(burst), "latency", "100ms"); err != nil {
			return fmt.Errorf("shaping the link to %s: %w", rate, err)
		}
	}
	return nil
}

// Unavailable says why no bed can be built on this machine ("" when one
// can, as far as can be told without building one): not root, or no ip
// or tc command.
func Unavailable() string {
	if os.Geteuid() != 0 {
		return "needs root (network namespaces, veth, bridge); run the tests as root, e.g. in a container or CI job"
	}
	for _, cmd := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return "needs the " + cmd + " command (Debian: apt-get install iproute2)"
		}
	}
	return ""
}

// Hosts returns the bed's hosts, host 0 first.
func (b *Bed) Hosts() []*Host { return b.hosts }

// Host returns host i.
func (b *Bed) Host(i int) *Host { return b.hosts[i] }

// Index returns the host's index in its bed.
func (h *Host) Index() int { return h.index }

// Namespace returns the name of the host's network namespace.
func (h *Host) Namespace() string { return h.ns }

// Name returns the host's host name, h<i>.
func (h *Host) Name() string { return fmt.Sprintf("h%d", h.index) }

// Addr returns the host's IPv4 address.
func (h *Host) Addr() string { return fmt.Sprintf("%s.%d", Subnet, h.index+1) }

// port is the name of the host's link's end in the switch.
func (h *Host) port() string { return fmt.Sprintf("h%d", h.index) }

// Command returns a command that runs name with args on the host: in its
// network namespace, in a UTS namespace of its own whose host name is
// the host's (h<i>), with the test's environment. What it starts, and
// every process those start, belongs to the host (KillHost, teardown).
// ctx kills the command as exec.CommandContext does.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	// ip netns exec enters the namespace and execs sh, which names the
	// fresh UTS namespace (CLONE_NEWUTS below) and execs the command.
	argv := append([]string{"netns", "exec", h.ns, "sh", "-c",
		`echo "$0" >/proc/sys/kernel/hostname && exec "$@"`, h.Name(), name}, args...)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	cmd.SysProcAttr = newUTS()
	return cmd
}

// KillHost sends SIGKILL to every process on host i, as if the host lost
// power, and returns once none is left (at most 10 s). The host's
// network stays; its processes' connections are reset by its kernel.
func (b *Bed) KillHost(i int) error {
	return killAll(b.hosts[i].ns, 10*time.Second)
}

// CutLink takes host i's link down at the switch, as if its cable were
// pulled: nothing passes either way, and no connection is told.
func (b *Bed) CutLink(i int) error {
	return ip("-n", b.sw, "link", "set", b.hosts[i].port(), "down")
}

// RestoreLink brings host i's link back up after CutLink.
func (b *Bed) RestoreLink(i int) error {
	return ip("-n", b.sw, "link", "set", b.hosts[i].port(), "up")
}

// Pids returns the processes running on the host.
func (h *Host) Pids() ([]int, error) { return nsPids(h.ns) }

// teardown kills every process of the bed and deletes its namespaces.
func (b *Bed) teardown() {
	var errs []error
	names := []string{b.sw}
	for _, h := range b.hosts {
		names = append(names, h.ns)
	}
	for _, ns := range names {
		if err := removeNamespace(ns); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		b.tb.Errorf("testbed: teardown: %v", err)
	}
}

// ParseRate parses a rate in tc's syntax (a number and bit, kbit, mbit,
// gbit; k, m, g are powers of 1000, as tc reads them) into bits per
// second.
func ParseRate(s string) (float64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}}
	for _, u := range units {
		num, ok := strings.CutSuffix(strings.ToLower(s), u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil {
			break
		}
		if r := v * u.mult; !(r >= 8000 && r <= 1e12) {
			return 0, fmt.Errorf("rate %q: want 8kbit to 1000gbit", s)
		}
		return v * u.mult, nil
	}
	return 0, fmt.Errorf("rate %q: want a number and bit, kbit, mbit or gbit (\"1gbit\")", s)
}

// burstBytes is the token bucket's size for a rate: d of it (0: 5 ms),
// at least 16 KiB (more than a 1500-byte frame and a few segments), so
// that the bucket refills between timer ticks without letting more than a
// few milliseconds through at once.
func burstBytes(bitsPerSec float64, d time.Duration) int {
	if d <= 0 {
		d = 5 * time.Millisecond
	}
	return max(int(bitsPerSec/8*d.Seconds()), 16<<10)
}
