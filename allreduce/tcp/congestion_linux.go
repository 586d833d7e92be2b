package tcp

import (
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// setCongestionRaw sets the congestion control of socket rc to name
// (TCP_CONGESTION).
func setCongestionRaw(rc syscall.RawConn, name string) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); err != nil {
		return err
	}
	return serr
}

// congestionOf is nc's congestion control.
func congestionOf(nc *net.TCPConn) (string, error) {
	rc, err := nc.SyscallConn()
	if err != nil {
		return "", err
	}
	var name string
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		name, gerr = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	}); err != nil {
		return "", err
	}
	return strings.TrimRight(name, "\x00"), gerr
}

// trySocketCongestion sets name on a fresh TCP socket, which it closes:
// whether this process may use it. The error lists what the host allows.
func trySocketCongestion(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, name); err != nil {
		allowed, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
		available, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
		return fmt.Errorf("%w (available: %s; allowed without privileges: %s)", err,
			strings.TrimSpace(string(available)), strings.TrimSpace(string(allowed)))
	}
	return nil
}
