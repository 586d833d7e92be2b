package tcp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Defaults of Config.
const (
	DefaultListenAddr     = "127.0.0.1:0"
	DefaultRunID          = mpconn.DefaultRunID
	DefaultTimeout        = mpconn.DefaultTimeout // 30 s, as gloo
	DefaultConnectTimeout = mpconn.DefaultConnectTimeout
	DefaultMaxMessage     = mpconn.DefaultMaxMessage
	DefaultSocketBuffer   = 4 << 20
	// DefaultHandshakeTimeout is the default of Config.HandshakeTimeout.
	DefaultHandshakeTimeout = mpconn.DefaultHandshakeTimeout
)

// Config describes one rank of a TCP mesh.
type Config struct {
	Rank int // this rank, 0..Size-1
	Size int // number of ranks
	// Store is where ranks publish their addresses (a rendezvous.TCPStore
	// across processes, a MemStore in one). Unused when Size is 1.
	Store rendezvous.Store
	// RunID namespaces the store keys and must match on every rank; at
	// most 255 printable bytes. Default "default".
	RunID string

	// Secret authenticates every connection (HMAC-SHA256 challenge and
	// response in both directions, the dialing rank proving it first) and
	// keys each link's session key. Required when Size > 1 unless Insecure,
	// and it must pass rendezvous.CheckSecret: at least 16 bytes, not all
	// digits, at least 8 distinct byte values (32 random bytes, as the
	// launcher makes, are best).
	Secret []byte
	// Insecure runs without a secret: an explicit opt-out, refused by ranks
	// that have one.
	Insecure bool
	// WireProtection protects the frames after the handshake, keyed from
	// it (wireprotect.go): WireNone, WireMAC (every frame's header and
	// payload authenticated, with record counters against replay and
	// reordering), WireAEAD (also encrypted) or WireAuto (mac on links
	// between hosts, none on links within one). Every rank must use the
	// same: the handshake refuses a peer of another mode, and a frame of
	// another mode fails its check. Default DefaultWireProtection (auto);
	// none when Insecure, which has no key (mac, aead or auto with
	// Insecure is an error).
	WireProtection WireProtection
	// sameHost, a test hook, decides whether a link's ends are on one
	// host for WireAuto (default sameHost).
	sameHost func(local, remote net.Addr) bool

	// ListenAddr is where this rank listens for the ranks above it (they
	// dial it), "host:port"; port 0 picks a free port.
	// Default "127.0.0.1:0" (loopback: single-host jobs). Multi-host jobs
	// listen on a reachable address, e.g. ":0" with AdvertiseAddr.
	ListenAddr string
	// AdvertiseAddr is the "host" or "host:port" published for peers.
	// Default: the listener's address; a wildcard listener (":0",
	// "0.0.0.0:0") publishes os.Hostname() with the listener's port.
	AdvertiseAddr string

	// Timeout fails a Send or Recv that sees no progress for this long
	// with a *transport.TimeoutError. Default 30 s.
	Timeout time.Duration
	// ConnectTimeout bounds Dial: store lookups, connection retries while
	// peers start, and handshakes. Default 5 min.
	ConnectTimeout time.Duration
	// HandshakeTimeout bounds each connection's handshake: a listening
	// rank closes a connection that has not proved the secret and been
	// answered within it (so that strangers cannot hold its slots), and a
	// dialing rank gives up on the connection and dials again. Default 2 s;
	// raise it only for round trips near a second.
	HandshakeTimeout time.Duration
	// MaxMessage is the largest message, in bytes, sent or accepted.
	// Default 1 GiB.
	MaxMessage int64
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF. Default 4 MiB; negative
	// leaves the kernel's defaults (and its buffer autotuning).
	SocketBuffer int
	// Congestion is the congestion control of the mesh's connections
	// (congestion.go): "" (the default) sets reno on connections within
	// this host and leaves the host's default on connections between
	// hosts; CongestionSystem
	// ("system") leaves every connection's; another name ("bbr", "reno",
	// ...) is set on every connection, and Dial fails if this process
	// cannot set it. Linux only: elsewhere "" leaves every connection's
	// and a name is an error.
	Congestion string
	// Spin is how long a receive of at most 1 MiB makes its link's reader
	// poll the socket, instead of parking in the network poller (see
	// poller): CPU traded for small-message latency. Default 2 ms;
	// negative never polls.
	Spin time.Duration

	// LocalRank and LocalSize are this rank's place on its host (Conn.LocalRank, Conn.LocalSize). LocalSize 0 (the
	// default) works them out: ranks whose connection to this one has the
	// same address at both ends are on this host.
	LocalRank int
	LocalSize int
	// Log receives the lines Dial prints while the mesh forms, one call
	// per line (no trailing newline): each connection it turns away
	// before it authenticates, with where from and why (the first of each
	// cause and source at once, repeats counted and summed up later), and
	// every 15 s whom it still waits for and what it knows of them.
	// Default: the lines go to os.Stderr.
	Log func(line string)
	// progressEvery, a test hook: how often Dial says whom it still waits
	// for (default mpconn.DefaultProgressEvery).
	progressEvery time.Duration

	// Node names this rank's node (host) for topology-aware algorithms:
	// ranks with the same name are on one node. Default: the host name.
	// ConfigFromEnv takes RINGDDP_NODE when set (to simulate nodes on one
	// host).
	Node string
}

func (c Config) withDefaults() (Config, error) {
	if c.Node == "" {
		c.Node, _ = os.Hostname()
	}
	if err := mpconn.CheckJob("tcp", c.Rank, c.Size, &c.RunID, c.Store, c.Secret, c.Insecure); err != nil {
		return c, err
	}
	if err := c.checkWireProtection(); err != nil {
		return c, err
	}
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
	if err := mpconn.DefaultLimits("tcp", &c.Timeout, &c.ConnectTimeout, &c.HandshakeTimeout, &c.MaxMessage, maxPayload); err != nil {
		return c, err
	}
	if c.progressEvery == 0 {
		c.progressEvery = mpconn.DefaultProgressEvery
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = DefaultSocketBuffer
	}
	if err := c.checkCongestion(); err != nil {
		return c, err
	}
	if c.LocalSize < 0 || (c.LocalSize > 0 && (c.LocalRank < 0 || c.LocalRank >= c.LocalSize || c.LocalSize > c.Size)) {
		return c, fmt.Errorf("tcp: %w: local rank %d of %d (world size %d)", transport.ErrInvalid, c.LocalRank, c.LocalSize, c.Size)
	}
	return c, nil
}

// checkWireProtection validates and defaults WireProtection.
func (c *Config) checkWireProtection() error {
	m, err := ParseWireProtection(string(c.WireProtection))
	if err != nil {
		return fmt.Errorf("tcp: %w: %w", transport.ErrInvalid, err)
	}
	switch {
	case m == "" && c.Insecure:
		m = WireNone
	case m == "":
		m = DefaultWireProtection
	case m != WireNone && c.Insecure:
		return fmt.Errorf("tcp: %w: wire protection %s needs the job's secret, and Insecure runs without one (use %s, or a secret)", transport.ErrInvalid, m, WireNone)
	}
	c.WireProtection = m
	return nil
}

func (c *Config) mode() byte {
	if c.Insecure {
		return modeInsecure
	}
	return modeHMAC
}

// addrKey is the store key under which rank publishes its address.
func addrKey(runID string, rank int) string {
	return fmt.Sprintf("ringddp/tcp/%s/addr/%d", runID, rank)
}

// errPeerClosed: the peer closed its endpoint (a goodbye frame).
var errPeerClosed = errors.New("closed its endpoint")

// ConfigFromEnv is the Config of the rank env describes (see
// rendezvous.FromEnv), rendezvousing through store: rank, size, secret and
// local placement come from env. A job whose master is on this machine's
// loopback listens on loopback; otherwise the rank listens on the address
// of the interface that routes to the master, which is what it publishes.
// Adjust the result (RunID, Timeout, ...) before Dial.
func ConfigFromEnv(env rendezvous.Env, store rendezvous.Store) Config {
	cfg := Config{
		Rank:      env.Rank,
		Size:      env.WorldSize,
		Store:     store,
		Secret:    env.Secret,
		LocalRank: env.LocalRank,
		LocalSize: env.LocalWorldSize,
		Node:      env.Node,
	}
	if cfg.LocalSize == 0 {
		cfg.LocalRank = 0
	}
	cfg.ListenAddr = listenAddrToward(env.MasterAddr, env.MasterPort)
	return cfg
}

// listenAddrToward picks the local address peers can reach, judging by the
// route to the master: "127.0.0.1:0" for a loopback (or absent) master,
// "<local IP>:0" otherwise, or ":0" (every interface, advertised by host
// name) when there is no route.
func listenAddrToward(master string, port int) string {
	if master == "" || master == "localhost" {
		return DefaultListenAddr
	}
	if ip := net.ParseIP(master); ip != nil && ip.IsLoopback() {
		return DefaultListenAddr
	}
	// Connecting a UDP socket sends nothing; it only asks for a route.
	c, err := net.Dial("udp", net.JoinHostPort(master, strconv.Itoa(max(port, 1))))
	if err != nil {
		return ":0"
	}
	defer c.Close()
	la, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok || la.IP.IsUnspecified() {
		return ":0"
	}
	return net.JoinHostPort(la.IP.String(), "0")
}
