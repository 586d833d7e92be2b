//go:build linux

package tcp

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// TestCongestion: by default the links of a mesh within one host run
// reno whatever the host's default is; links between hosts (the sameHost hook says so) keep the host's
// default, as "system" keeps it on every link; a name is set on every
// link; a name this process cannot set fails Dial with an error naming
// it, before any connection.
func TestCongestion(t *testing.T) {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Skipf("no congestion control to read: %v", err)
	}
	hostDefault := strings.TrimSpace(string(raw))
	if err := trySocketCongestion(loopbackCongestion); err != nil {
		t.Skipf("this host does not let a socket's congestion control be set: %v", err)
	}
	if got := congestionFor("", onThisHost, nil, &net.TCPAddr{IP: net.ParseIP("192.0.2.7")}); got != "" {
		t.Errorf("a connection to 192.0.2.7 (TEST-NET-1) gets %q by default, want the host's", got)
	}
	if got := congestionFor("", onThisHost, nil, &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}); got != loopbackCongestion {
		t.Errorf("a connection to 127.0.0.1 gets %q by default, want %q", got, loopbackCongestion)
	}
	for _, tc := range []struct {
		name    string
		setting string
		want    string
	}{
		{"default within a host", "", "reno"},
		{"system", "System", hostDefault},
		{"a name", " " + hostDefault + " ", hostDefault},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conns := dialMesh(t, 3, func(c *Config) { c.Congestion = tc.setting })
			for _, c := range conns {
				for peer, l := range c.core.Links {
					if l == nil {
						continue
					}
					got, err := congestionOf(l.nc)
					if err != nil {
						t.Fatal(err)
					}
					if got != tc.want {
						t.Errorf("rank %d's link to %d runs %q, want %q", c.Rank(), peer, got, tc.want)
					}
				}
			}
		})
	}
	cfg := testConfig(0, 2, rendezvous.NewMemStore())
	cfg.Congestion = "no-such-algorithm"
	_, err = Dial(context.Background(), cfg)
	if !errors.Is(err, transport.ErrInvalid) || !strings.Contains(err.Error(), `"no-such-algorithm"`) || !strings.Contains(err.Error(), "available") {
		t.Errorf("Dial with an unknown congestion control: %v", err)
	}
}
