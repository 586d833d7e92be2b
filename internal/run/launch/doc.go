// Package launch runs a command as a multi-process job over the tcp
// transport: it decides whether this process is one rank of a job or the
// job's launcher, starts the ranks when it is the launcher, and connects a
// rank to the others.
//
// Roles (Detect, Flags.Setup). A process whose environment sets a rank —
// RANK/WORLD_SIZE (torchrun, this package's launcher, a Kubernetes Job),
// OMPI_COMM_WORLD_RANK/SIZE (mpirun), SLURM_PROCID/SLURM_NTASKS (srun); see
// rendezvous.FromEnv — is that one rank. Otherwise a command run with
// -transport tcp is the launcher.
//
// The launcher (Run) is like `torchrun --standalone`: it re-executes its
// own binary with the same arguments as -ranks child processes, each with
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// RINGDDP_SECRET and RINGDDP_RUN_ID set, and GOMAXPROCS (unless set
// already) to this process's GOMAXPROCS divided among the ranks, at least 1,
// so that the host's ranks together run no more scheduler threads than it
// has processors (as in-process ranks do). On one node (the default) the
// ranks meet on loopback: MASTER_ADDR is 127.0.0.1, MASTER_PORT a free
// port, and the secret a fresh random one (crypto/rand), so no other user
// of the host can join the job. With -nnodes N the launcher on node k
// (-node-rank k) starts global ranks k·ranks … k·ranks+ranks-1 of
// N·ranks. The launchers first meet at -master host:port, where node 0's
// launcher hosts their rendezvous (nodes.go, nodes_join.go): every node
// joins and agrees (-ranks, -nnodes, -master) before any rank starts, each
// waiting launcher says as it goes whom it waits for and why, and a
// misconfiguration ends every node within seconds naming it. Rank 0's
// store then takes a fresh port node 0's launcher binds. The job's secret
// is RINGDDP_SECRET from the launchers' environment, the same on every
// node (an error when absent, unless -insecure); the ranks get a secret
// derived from it (nodes_seal.go), and listen on the address of the
// interface that routes to the master (tcp.ConfigFromEnv).
//
// Output: every line a rank writes to stdout or stderr is forwarded, as a
// whole line, with a "[rank r] " prefix — except rank 0's stdout, which is
// passed through unchanged (its own file descriptor when the launcher's
// stdout is a file or terminal), so that the job's main output (the
// trainer's plan and epoch lines, the benchmark's table, JSON lines) reads
// exactly as in a single process. Config.PrefixRank0 prefixes it too.
//
// Failures: when a rank exits with a non-zero status or is killed, the
// launcher prints which, stops the other ranks (SIGTERM to each rank's
// process group, SIGKILL after Config.Grace, default 5 s) and returns an
// error naming the rank and its exit status. An interrupt (Ctrl-C) or
// SIGTERM received by the launcher is forwarded to every rank, once per
// signal (ranks run in their own process groups, so the terminal's Ctrl-C
// reaches them only through the launcher): a rank that handles it can stop
// cleanly (cmd/train finishes the step and writes its checkpoint), and
// after an interrupt a rank's non-zero exit no longer stops the others. On
// Linux the ranks are killed if the launcher dies.
//
// Restarts (Elastic, elastic.go): with Config.Elastic.MaxRestarts > 0 a
// job that loses a rank is stopped and started again, with a fresh store
// port and run id and RINGDDP_RESTART set, on the world size and arguments
// Elastic.Prepare returns (cmd/train: from the newest valid checkpoint, on
// fewer ranks when the failed one failed at start-up); every restart is
// reported (Elastic.OnRestart), and when no restart is left the error, a
// *RestartsExhaustedError, names every failure. Whether and how to restart
// is decided in one place, without I/O (restart.go), for one host and for
// several nodes alike. The launcher learns how
// far training got from a pipe every rank inherits (RINGDDP_STATUS_FD,
// status.go). With several nodes (nodes.go) the launchers agree on every
// attempt through a store node 0's launcher hosts at -master (rank 0's
// store moves to a port node 0's launcher binds per attempt): a node
// whose rank fails tells the others, which stop theirs; node 0 waits
// Elastic.RejoinTimeout for the nodes to come back, drops those that do
// not (whole nodes, down to Elastic.MinRanks), chooses the checkpoint and
// world size, and publishes the plan every node starts its ranks by.
//
// A rank (Connect) connects the job's store — rank 0 hosts it at
// MASTER_ADDR:MASTER_PORT, and keeps it open until its Conn is closed —
// and dials the TCP mesh (tcp.Dial) authenticated with RINGDDP_SECRET.
// RINGDDP_INSECURE=1 (or Options.Insecure, the commands' -insecure) is the
// explicit opt-out that runs without a secret; setting it together with
// RINGDDP_SECRET is an error. The run id comes from RINGDDP_RUN_ID, else
// TORCHELASTIC_RUN_ID, else SLURM_JOB_ID, else "default". A peer that dies
// or stalls makes every pending and later collective fail within the
// transport's timeout (Options.Timeout, default 30 s as in gloo) with an
// error naming the rank. RINGDDP_TCP_SPIN sets how long a small receive
// polls its socket (tcp.Config.Spin; "off" never polls);
// RINGDDP_TCP_CONGESTION the connections' congestion control
// (tcp.Config.Congestion: reno within a host by default, "system" for the
// host's default everywhere, or a name for every connection). Connect leaves
// GOMAXPROCS alone; ShareCores, called explicitly, gives a rank whose
// launcher says how many ranks share its host its share of the cores
// (unless GOMAXPROCS is set), as the ringddp launcher does for its ranks.
//
// Commands (TransportFlags, Transport): cmd/train and cmd/bench share one
// transport layer: the -transport (inproc or tcp) and -timeout flags
// beside the multi-process flags, one set of timeout defaults
// (DefaultInprocTimeout, DefaultTimeout), and resolving them into a
// Transport that connects this process's endpoints, or launches the ranks
// when this process is a tcp job's launcher.
//
// Security: the secret authenticates every connection (store and mesh).
// A rank removes RINGDDP_SECRET from its environment once Connect has read
// it. With several nodes only the launchers hold the job's secret; what
// they exchange is MACed under a key the ranks cannot derive, and checked
// field by field (nodes_check.go).
// Afterwards the mesh's frames are protected as RINGDDP_WIRE_PROTECTION
// (Options.WireProtection, the commands' -wire-protection) says: auto by
// default, mac (every frame authenticated) on links between hosts and none
// on links within one, whose bytes never leave the kernel; mac everywhere,
// aead (also encrypted) or none on request (tcp.WireProtection). All but
// none need the secret; with the insecure opt-out the default is none.
package launch
