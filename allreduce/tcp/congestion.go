package tcp

import (
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Congestion control (Config.Congestion). A link carries a collective's
// bulk transfers between two ranks that wait on each other, so the sender's
// congestion control decides how much of a message is in flight. Some hosts
// default to BBR (net.ipv4.tcp_congestion_control), which paces a
// connection at the bandwidth it estimates: on loopback, a few seconds into
// a job, its 1 MiB all-reduces slowed down by about half again, while under
// reno, set before the connection was made, they kept their speed from the
// first round to the last (docs/multiprocess.md and docs/measurements.md
// have the figures). So by default a connection whose two ends are on this
// host (sameHost: loopback, or one address at both ends) runs reno, which
// every process may set (net.ipv4.tcp_allowed_congestion_control always has
// it); a connection between hosts keeps the host's default, its
// administrator's choice for that network.

// CongestionSystem is the Config.Congestion that leaves every connection's
// congestion control as the host sets it.
const CongestionSystem = "system"

// loopbackCongestion is the congestion control a connection within one
// host gets by default.
const loopbackCongestion = "reno"

// congestionFor is the congestion control of a connection from local to
// remote under setting s (Config.Congestion): "" when it keeps the host's.
func congestionFor(s string, same func(local, remote net.Addr) bool, local, remote net.Addr) string {
	switch {
	case s == "" && same(local, remote):
		return loopbackCongestion
	case s == "" || s == CongestionSystem:
		return ""
	}
	return s
}

// The congestion control is set before a connection exists where its
// policy is known then, so that the socket never runs the host's default:
// a socket switched to reno after its connection was made under BBR kept
// running slower than one made under reno (and one switched from cubic
// slower still). The
// dialer knows whether the rank it dials is on this host (its address is
// loopback or one of this host's); a listener on loopback has only peers
// on this host, and its connections inherit its setting. What is left (a
// connection accepted by a listener on a routable address from a rank on
// this host) is switched once established (tune).

// dialControl is the net.Dialer.Control of setting s: the congestion
// control of a connection to address, set on its socket before it
// connects.
func dialControl(s string) func(network, address string, rc syscall.RawConn) error {
	return func(_, address string, rc syscall.RawConn) error {
		if name := congestionFor(s, onThisHost, nil, tcpAddr(address)); name != "" {
			_ = setCongestionRaw(rc, name) // checked by Dial: best effort
		}
		return nil
	}
}

// listenControl is the net.ListenConfig.Control of setting s: a listener
// on loopback gets the congestion control of a connection within this
// host, which the connections it accepts inherit; another listener gets
// only a name s sets on every connection.
func listenControl(s string) func(network, address string, rc syscall.RawConn) error {
	return func(_, address string, rc syscall.RawConn) error {
		ip := tcpAddr(address).IP
		loopback := func(net.Addr, net.Addr) bool { return ip != nil && ip.IsLoopback() }
		if name := congestionFor(s, loopback, nil, nil); name != "" {
			_ = setCongestionRaw(rc, name)
		}
		return nil
	}
}

// tcpAddr parses "ip:port" (a socket's address, resolved): nil IP when it
// is not one.
func tcpAddr(address string) *net.TCPAddr {
	host, _, _ := net.SplitHostPort(address)
	return &net.TCPAddr{IP: net.ParseIP(host)}
}

// onThisHost reports whether remote's IP is loopback or one of this
// host's interfaces' (local is not needed: the dialer's is not known yet).
func onThisHost(_, remote net.Addr) bool {
	ra, ok := remote.(*net.TCPAddr)
	if !ok || ra.IP == nil {
		return false
	}
	if ra.IP.IsLoopback() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ra.IP) {
			return true
		}
	}
	return false
}

// setLinkCongestion gives the established nc the congestion control name
// ("": leave it), unless it has it already (set before it connected).
func setLinkCongestion(nc *net.TCPConn, name string) error {
	if name == "" {
		return nil
	}
	if cur, err := congestionOf(nc); err == nil && cur == name {
		return nil
	}
	rc, err := nc.SyscallConn()
	if err != nil {
		return err
	}
	return setCongestionRaw(rc, name)
}

// checkCongestion validates and normalises c.Congestion: "" (the default
// policy), CongestionSystem, or an algorithm this host lets this process
// set on a socket (tried on one, so that a misspelt or forbidden name is
// an error of Dial, not a silent default).
func (c *Config) checkCongestion() error {
	s := strings.TrimSpace(c.Congestion)
	if strings.EqualFold(s, CongestionSystem) {
		s = CongestionSystem
	}
	c.Congestion = s
	if s == "" || s == CongestionSystem {
		return nil
	}
	if err := trySocketCongestion(s); err != nil {
		return fmt.Errorf("tcp: %w: congestion control %q cannot be set here (\"\" for the default: %s within a host; %q to leave the host's): %w",
			transport.ErrInvalid, s, loopbackCongestion, CongestionSystem, err)
	}
	return nil
}
