package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ringddp/ringddp/allreduce/mixed"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/shm"
	"github.com/ringddp/ringddp/allreduce/tcp"
)

// The -transport shm and auto choices of Connect: shm for a job on one
// host, tcp for one rank per host, mixed (shm within hosts, tcp between)
// otherwise.

// The transports Connect can dial, as chooseTransport decides.
const (
	dialTCP   = "tcp"
	dialShm   = "shm"
	dialMixed = "mixed" // shm among each host's ranks, tcp between hosts (package mixed)
)

// chooseTransport decides what this rank dials: tcp for TCP (or ""), shm
// for Shm, and for Auto what the ranks' hosts call for (hostsOf): shm
// when every rank is on this host, tcp when every rank has a host of its
// own, mixed (with every rank's host, by rank) when the job spans hosts
// and some host runs several ranks. Every rank comes to the same answer.
// An unknown name is an error.
func chooseTransport(ctx context.Context, name string, store rendezvous.Store, env rendezvous.Env, runID string) (string, []string, error) {
	switch name {
	case "", TCP:
		return dialTCP, nil, nil
	case Shm:
		return dialShm, nil, nil
	case Auto:
		if env.WorldSize == 1 || store == nil {
			return dialTCP, nil, nil
		}
		hosts, err := hostsOf(ctx, store, env, runID)
		if err != nil {
			return "", nil, err
		}
		return autoChoice(hosts), hosts, nil
	}
	return "", nil, fmt.Errorf("transport %q: unknown (valid: %s)", name, TransportNames())
}

// autoChoice is -transport auto's choice for ranks on hosts (by rank).
func autoChoice(hosts []string) string {
	count := map[string]int{}
	shared := false
	for _, h := range hosts {
		count[h]++
		shared = shared || count[h] > 1
	}
	switch {
	case len(count) == 1 && len(hosts) > 1:
		return dialShm
	case !shared:
		return dialTCP
	}
	return dialMixed
}

// hostsOf is every rank's host, by rank: each rank publishes its identity
// (hostIdentity) in the store and reads every other's. Ranks whose
// identity is unknown get a host of their own ("rank <r>"), so they talk
// tcp with everyone.
func hostsOf(ctx context.Context, store rendezvous.Store, env rendezvous.Env, runID string) ([]string, error) {
	me := hostIdentity(env.Node)
	key := func(r int) string { return fmt.Sprintf("ringddp/auto/%s/host/%d", runID, r) }
	if err := store.Set(ctx, key(env.Rank), []byte(me)); err != nil {
		return nil, fmt.Errorf("-transport auto: publishing this host's identity: %w", err)
	}
	hosts := make([]string, env.WorldSize)
	for r := range hosts {
		v, err := store.Get(ctx, key(r))
		if err != nil {
			return nil, fmt.Errorf("-transport auto: rank %d's host: %w", r, err)
		}
		hosts[r] = string(v)
		if hosts[r] == "" {
			hosts[r] = fmt.Sprintf("rank %d", r)
		}
	}
	return hosts, nil
}

// unknownHosts is -transport auto's warning (rank 0 prints it) when some
// ranks' hosts are unknown (hostsOf's "rank <r>"): they talk tcp with
// every rank, their own host's included, which would otherwise pass
// without a word; "" when every host is known.
func unknownHosts(hosts []string) string {
	var unknown []string
	for r, h := range hosts {
		if h == fmt.Sprintf("rank %d", r) {
			unknown = append(unknown, fmt.Sprint(r))
		}
	}
	if len(unknown) == 0 {
		return ""
	}
	return fmt.Sprintf("ringddp: WARNING: -transport auto: the host of rank(s) %s is unknown (no /proc/sys/kernel/random/boot_id or /proc/self/ns/net): they use tcp with every rank, their own host's included, not shared memory\n", strings.Join(unknown, ", "))
}

// hostIdentity is this kernel's boot id and this process's network
// namespace — what shm needs shared (its ranks meet on abstract Unix
// sockets and pass memfds) — and node (RINGDDP_NODE), when set, so that
// ranks given different node names count as different hosts (simulated
// hosts on one machine); "" when the boot id or namespace is unknown.
func hostIdentity(node string) string {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return ""
	}
	id := strings.TrimSpace(string(boot)) + " " + ns
	if node != "" {
		id += " node=" + node
	}
	return id
}

// dialEndpoint dials what chooseTransport chose (kind, with hosts for
// mixed) as the rank the tcp config describes.
func dialEndpoint(ctx context.Context, kind string, cfg tcp.Config, hosts []string) (Endpoint, error) {
	switch kind {
	case dialShm:
		return connectShm(ctx, cfg)
	case dialMixed:
		return connectMixed(ctx, cfg, hosts)
	}
	return tcp.Dial(ctx, cfg)
}

// connectShm dials the shared-memory world that the tcp config describes
// (the same rank, store, secret, run id and timeouts).
func connectShm(ctx context.Context, t tcp.Config) (Endpoint, error) {
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

// connectMixed dials the tcp mesh of every rank and the shm world of this
// rank's host (package mixed), hosts naming every rank's host.
func connectMixed(ctx context.Context, t tcp.Config, hosts []string) (Endpoint, error) {
	c, err := mixed.Dial(ctx, mixed.Config{World: t, Hosts: hosts})
	if err != nil {
		if errors.Is(err, shm.ErrUnsupported) {
			return nil, fmt.Errorf("-transport %s: %w", Auto, err)
		}
		return nil, err
	}
	return c, nil
}
