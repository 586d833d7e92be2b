package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/shm"
	"github.com/ringddp/ringddp/allreduce/tcp"
)

// The -transport shm and auto choices of Connect.

// chooseShm reports whether this rank dials shm: always for Shm, never
// for TCP (or ""), and for Auto when every rank is on this host
// (sameHost). An unknown name is an error.
func chooseShm(ctx context.Context, name string, store rendezvous.Store, env rendezvous.Env, runID string) (bool, error) {
	switch name {
	case "", TCP:
		return false, nil
	case Shm:
		return true, nil
	case Auto:
		if env.WorldSize == 1 || store == nil {
			return false, nil
		}
		return sameHost(ctx, store, env, runID)
	}
	return false, fmt.Errorf("launch: transport %q: unknown (valid: %s)", name, TransportNames())
}

// sameHost reports whether every rank of the job shares this process's
// kernel (boot id) and network namespace, which is what shm needs (its
// ranks meet on abstract Unix sockets and pass memfds). Each rank
// publishes its identity in the store and reads every other's, so every
// rank comes to the same answer.
func sameHost(ctx context.Context, store rendezvous.Store, env rendezvous.Env, runID string) (bool, error) {
	me := hostIdentity()
	key := func(r int) string { return fmt.Sprintf("ringddp/auto/%s/host/%d", runID, r) }
	if err := store.Set(ctx, key(env.Rank), []byte(me)); err != nil {
		return false, fmt.Errorf("launch: -transport auto: publishing this host's identity: %w", err)
	}
	same := me != ""
	for r := range env.WorldSize {
		v, err := store.Get(ctx, key(r))
		if err != nil {
			return false, fmt.Errorf("launch: -transport auto: rank %d's host: %w", r, err)
		}
		same = same && string(v) == me
	}
	return same, nil
}

// hostIdentity is this kernel's boot id and this process's network
// namespace, or "" when either is unknown (auto then picks tcp).
func hostIdentity() string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(boot)) + " " + ns
}

// dialShm dials the shared-memory world that the tcp config describes
// (the same rank, store, secret, run id and timeouts).
func dialShm(ctx context.Context, t tcp.Config) (Endpoint, error) {
	c, err := shm.Dial(ctx, shm.Config{
		Rank: t.Rank, Size: t.Size, Store: t.Store, RunID: t.RunID,
		Secret: t.Secret, Insecure: t.Insecure,
		Timeout: t.Timeout, ConnectTimeout: t.ConnectTimeout,
		LocalRank: t.LocalRank, Node: t.Node,
	})
	if err != nil {
		if errors.Is(err, shm.ErrUnsupported) {
			return nil, fmt.Errorf("-transport %s: %w", Shm, err)
		}
		return nil, err
	}
	return c, nil
}
