package mixed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/ringddp/ringddp/allreduce/internal/mpconn"
	"github.com/ringddp/ringddp/allreduce/shm"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// Config describes one rank of a job that spans hosts.
type Config struct {
	// World is this rank of the whole job over tcp: rank, size, store,
	// secret (or Insecure), run id, timeouts, wire protection, node. Its
	// LocalRank and LocalSize are replaced by this rank's place among
	// Hosts.
	World tcp.Config
	// Hosts names each rank's host, by world rank: ranks with equal
	// names share a shared-memory world (they must share a kernel and a
	// network namespace; internal/run/launch names hosts by boot id and
	// namespace), the others talk over tcp. Every rank must pass the same.
	Hosts []string
	// Shm tunes the shared-memory world: Slots, SlotSize and Spin are
	// used (zero: shm's defaults); everything else comes from World.
	Shm shm.Config
}

// Dial joins the job: first the tcp mesh of every rank, then, when other
// ranks share this rank's host, the shm world of this host's ranks (its
// own run id, so that hosts' worlds never meet in the store). Every rank
// dials in the same order, so no rank waits for one that waits for it.
func Dial(ctx context.Context, cfg Config) (*Conn, error) {
	w := cfg.World
	if len(cfg.Hosts) != w.Size || w.Rank < 0 || w.Rank >= w.Size {
		return nil, fmt.Errorf("mixed: %w: rank %d of %d with %d hosts named", transport.ErrInvalid, w.Rank, w.Size, len(cfg.Hosts))
	}
	members := Members(cfg.Hosts, w.Rank)
	local := 0
	for i, m := range members {
		if m == w.Rank {
			local = i
		}
	}
	w.LocalRank, w.LocalSize = local, len(members)
	world, err := tcp.Dial(ctx, w)
	if err != nil {
		return nil, err
	}
	var loc Endpoint
	if len(members) > 1 {
		s := shm.Config{
			Rank: local, Size: len(members), Store: w.Store, RunID: HostRunID(w.RunID, members[0]),
			Secret: w.Secret, Insecure: w.Insecure,
			Slots: cfg.Shm.Slots, SlotSize: cfg.Shm.SlotSize, Spin: cfg.Shm.Spin,
			Timeout: w.Timeout, ConnectTimeout: w.ConnectTimeout, HandshakeTimeout: w.HandshakeTimeout,
			MaxMessage: w.MaxMessage, LocalRank: local, Node: world.NodeName(), WorldSize: w.Size,
		}
		sc, err := shm.Dial(ctx, s)
		if err != nil {
			err = fmt.Errorf("mixed rank %d of %d: the shared-memory world of this host's ranks %v: %w", w.Rank, w.Size, members, err)
			world.Abort(err)
			return nil, err
		}
		loc = sc
	}
	c, err := New(world, loc, members, world.NodeName())
	if err != nil {
		if loc != nil {
			loc.Abort(err)
		}
		world.Abort(err)
		return nil, err
	}
	return c, nil
}

// Members are the world ranks whose host is rank's, in order.
func Members(hosts []string, rank int) []int {
	var m []int
	for r, h := range hosts {
		if h == hosts[rank] {
			m = append(m, r)
		}
	}
	return m
}

// HostRunID is the run id of the shm world of the host whose lowest rank
// is first, in the job runID: "<runID>/host/<first>", or, when that would
// be too long for a run id, a hash of runID in its place.
func HostRunID(runID string, first int) string {
	if runID == "" {
		runID = mpconn.DefaultRunID
	}
	suffix := fmt.Sprintf("/host/%d", first)
	if len(runID)+len(suffix) > mpconn.MaxRunID {
		h := sha256.Sum256([]byte(runID))
		runID = "h-" + hex.EncodeToString(h[:16])
	}
	return runID + suffix
}
