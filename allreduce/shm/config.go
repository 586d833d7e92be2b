package shm

import (
	"fmt"
	"os"
	"time"

	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Defaults of Config.
const (
	DefaultRunID            = mpconn.DefaultRunID
	DefaultSlots            = 8
	DefaultSlotSize         = 256 << 10
	DefaultTimeout          = mpconn.DefaultTimeout
	DefaultConnectTimeout   = mpconn.DefaultConnectTimeout
	DefaultHandshakeTimeout = mpconn.DefaultHandshakeTimeout
	DefaultMaxMessage       = mpconn.DefaultMaxMessage
	// DefaultSpin is Config.Spin's default: how long a waiting call polls
	// its rings (yielding the core between polls) before it sleeps on the
	// futex.
	DefaultSpin = 200 * time.Microsecond
)

// Bounds of the ring geometry and of a rank's file.
const (
	minSlots    = 2
	maxSlots    = 1024
	minSlotSize = 4 << 10
	maxSlotSize = 16 << 20
	// MaxRegion bounds one rank's shared file: (Size-1) rings of Slots ×
	// SlotSize bytes, plus headers.
	MaxRegion = 4 << 30
	maxRunID  = mpconn.MaxRunID // the answer has room for this much
	// maxPayload bounds any length read from shared memory.
	maxPayload = 1 << 40
)

// Config describes one rank of a shared-memory world. Every rank must use
// the same Size, RunID, Secret (or Insecure), Slots and SlotSize.
type Config struct {
	Rank int // this rank, 0..Size-1
	Size int // number of ranks, all on this host
	// Store is where ranks publish their Unix socket names (a
	// rendezvous.TCPStore across processes, a MemStore in one). Unused
	// when Size is 1.
	Store rendezvous.Store
	// RunID namespaces the store keys; at most 255 printable bytes.
	// Default "default".
	RunID string
	// Secret authenticates every Unix-socket connection before any shared
	// memory changes hands (HMAC-SHA256 challenge-response, the dialing
	// rank proving it first). Required when Size > 1 unless Insecure; it
	// must pass rendezvous.CheckSecret.
	Secret []byte
	// Insecure runs without a secret: an explicit opt-out. Any process of
	// this host's network namespace can then join the world and map its
	// rings.
	Insecure bool

	// Slots is the number of slots of each directed ring (default 8) and
	// SlotSize the payload bytes of each slot, a multiple of 4 KiB
	// (default 256 KiB). Each rank's file holds Size-1 rings, so the world
	// holds Size·(Size-1)·Slots·SlotSize bytes of shared memory, allocated
	// up front.
	Slots    int
	SlotSize int

	// Timeout fails a call that sees no progress for this long with a
	// *transport.TimeoutError. Default 30 s.
	Timeout time.Duration
	// ConnectTimeout bounds Dial. Default 5 min.
	ConnectTimeout time.Duration
	// HandshakeTimeout bounds each connection's handshake. Default 2 s.
	HandshakeTimeout time.Duration
	// Log receives the lines Dial prints while the world forms, one call
	// per line (no trailing newline): each connection it turns away before
	// it authenticates, with the process it came from (pid and uid) and
	// why (the first of each cause and user at once, repeats summed up
	// later), and every 15 s whom it still waits for. Default: the lines
	// go to os.Stderr.
	Log func(line string)
	// progressEvery, a test hook: how often Dial says whom it still waits
	// for (default mpconn.DefaultProgressEvery).
	progressEvery time.Duration
	// MaxMessage is the largest message, in bytes. Default 1 GiB.
	MaxMessage int64
	// Spin is how long a waiting call polls before sleeping on the futex;
	// negative sleeps at once. Default DefaultSpin.
	Spin time.Duration

	// LocalRank is this rank's index on the host (default Rank: every
	// rank of a shm world is on this host).
	LocalRank int
	// Node names this host for topology-aware algorithms. Default: the
	// host name.
	Node string
	// WorldSize bounds the ranks that a peer's abort record may name
	// (the mismatch that made it abort). Default Size; a world whose shm
	// ranks are some of a larger job's (package mixed) sets the job's
	// size, since its ranks abort with the job's rank numbers.
	WorldSize int
}

func (c Config) withDefaults() (Config, error) {
	if err := mpconn.CheckJob("shm", c.Rank, c.Size, &c.RunID, c.Store, c.Secret, c.Insecure); err != nil {
		return c, err
	}
	if c.Insecure {
		c.Secret = nil
	}
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.SlotSize == 0 {
		c.SlotSize = DefaultSlotSize
	}
	if c.Slots < minSlots || c.Slots > maxSlots {
		return c, fmt.Errorf("shm: %w: %d slots per ring (want %d..%d)", transport.ErrInvalid, c.Slots, minSlots, maxSlots)
	}
	if c.SlotSize < minSlotSize || c.SlotSize > maxSlotSize || c.SlotSize%minSlotSize != 0 {
		return c, fmt.Errorf("shm: %w: slot size %d (want a multiple of 4 KiB, %d..%d)", transport.ErrInvalid, c.SlotSize, minSlotSize, maxSlotSize)
	}
	if sz := regionSize(c.Size, c.Slots, c.SlotSize); sz > MaxRegion {
		return c, fmt.Errorf("shm: %w: %d ranks × %d slots × %d bytes need %d bytes of shared memory per rank (at most %d): use fewer or smaller slots",
			transport.ErrInvalid, c.Size, c.Slots, c.SlotSize, sz, int64(MaxRegion))
	}
	if err := mpconn.DefaultLimits("shm", &c.Timeout, &c.ConnectTimeout, &c.HandshakeTimeout, &c.MaxMessage, maxPayload); err != nil {
		return c, err
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	if c.progressEvery == 0 {
		c.progressEvery = mpconn.DefaultProgressEvery
	}
	if c.LocalRank == 0 {
		c.LocalRank = c.Rank
	}
	if c.Node == "" {
		c.Node, _ = os.Hostname()
	}
	if c.WorldSize < c.Size {
		c.WorldSize = c.Size
	}
	return c, nil
}

// ConfigFromEnv is the Config of the rank env describes (see
// rendezvous.FromEnv), rendezvousing through store. Adjust the result
// (RunID, Timeout, ...) before Dial.
func ConfigFromEnv(env rendezvous.Env, store rendezvous.Store) Config {
	return Config{
		Rank:      env.Rank,
		Size:      env.WorldSize,
		Store:     store,
		Secret:    env.Secret,
		LocalRank: env.LocalRank,
		Node:      env.Node,
	}
}

// addrKey is the store key under which rank publishes its socket name.
func addrKey(runID string, rank int) string {
	return fmt.Sprintf("ringddp/shm/%s/addr/%d", runID, rank)
}
