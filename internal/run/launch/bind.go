package launch

import (
	"fmt"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
)

// EnvBind chooses how a rank process is bound to processors:
//
//   - "core": pinned, every thread, to its share of the processors the
//     process may run on (its affinity mask when it starts): the host's
//     ranks take consecutive blocks of len(allowed)/LOCAL_WORLD_SIZE
//     processors, local rank i the i-th, the GOMAXPROCS share the
//     launcher gives it; when the ranks outnumber the processors, local
//     rank i gets processor i mod len(allowed).
//   - "none" or empty: left to the operating system's scheduler.
//
// The ringddp launcher sets "core" for its ranks unless the variable is
// set (as mpirun binds its ranks to cores by default); a rank started by
// mpirun, srun or torchrun is bound only when the variable says so.
// Unbound, ranks that poll (shm, and tcp's spin) often share a core and
// poll in turn, which makes small collectives many times slower (the
// figures are in docs/multiprocess.md).
const EnvBind = "RINGDDP_BIND"

// checkBind reports an EnvBind value that is none of "", "none", "core".
func checkBind(v string) error {
	switch v {
	case "", "none", "core":
		return nil
	}
	return fmt.Errorf("%s=%s: unknown binding (want core or none)", EnvBind, v)
}

// BindShare is the processors local rank localRank of localSize ranks
// on the host gets out of allowed, the processors the host's ranks may
// use (see EnvBind); nil when there are none or the rank is out of range.
func BindShare(localRank, localSize int, allowed []int) []int {
	n := len(allowed)
	if n == 0 || localSize < 1 || localRank < 0 || localRank >= localSize {
		return nil
	}
	if localSize > n {
		return []int{allowed[localRank%n]}
	}
	k := n / localSize
	return append([]int(nil), allowed[localRank*k:(localRank+1)*k]...)
}

// Bind applies EnvBind (read with getenv) to this process as the rank env
// places on its host: with "core" and several ranks on the host it pins
// every thread of the process to BindShare's processors and returns
// them; otherwise it changes nothing and returns nil. An unknown value,
// or a system that refuses, is an error naming it.
func Bind(env rendezvous.Env, getenv func(string) string) ([]int, error) {
	v := getenv(EnvBind)
	if err := checkBind(v); err != nil || v != "core" || env.LocalWorldSize < 2 {
		return nil, err
	}
	allowed, err := allowedCPUs()
	if err != nil {
		return nil, fmt.Errorf("%s=core: %w", EnvBind, err)
	}
	cpus := BindShare(env.LocalRank, env.LocalWorldSize, allowed)
	if cpus == nil {
		return nil, fmt.Errorf("%s=core: local rank %d of %d has no processor among %v", EnvBind, env.LocalRank, env.LocalWorldSize, allowed)
	}
	if err := pinProcess(cpus); err != nil {
		return nil, fmt.Errorf("%s=core: pinning local rank %d to processors %v: %w", EnvBind, env.LocalRank, cpus, err)
	}
	return cpus, nil
}
