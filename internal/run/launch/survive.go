package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/untrusted"
)

// Survivors continue (-on-failure continue, docs/elastic.md). The
// launcher hosts the job's store itself (not rank 0, which may be the
// rank that dies) and tells its ranks so with EnvOnFailure. A rank is a
// Survivor: it dials generation 0's tcp mesh like any rank, and when its
// group fails — a peer died, or made no progress for -timeout — it
//
//  1. reports the fault at its generation's fault key, unless another
//     member or the launcher did already (every member's Watch sees the
//     key set and aborts its group's collective in flight, so that no
//     member waits for its own timeout);
//  2. checks in at its alive key: the members that check in within the
//     launcher's window (Elastic.CheckIn) form the next generation, the
//     others are removed (revoked) for good;
//  3. waits for the launcher's plan of the next generation and dials its
//     mesh, under the generation's run id, as the rank the plan gives it.
//
// A rank the plan leaves out (a stopped rank continued after its removal)
// gets a *RevokedError and exits: it cannot come back without healing. A
// plan that falls back to a restart gives a *FallBackError.

// EnvOnFailure tells a rank what its launcher does when a rank fails:
// "continue" (the launcher hosts the store and coordinates generations;
// the rank is a Survivor), else nothing (restart or end the job).
const EnvOnFailure = "RINGDDP_ON_FAILURE"

// The -on-failure values.
const (
	OnFailureRestart  = "restart"
	OnFailureContinue = "continue"
)

// Survivor is one rank of a job whose survivors continue after a failure.
// It is used by one goroutine at a time, but Watch's abort runs on its own.
type Survivor struct {
	start    rendezvous.Env // the rank as the job started
	rs       rankSettings
	store    *rendezvous.TCPStore
	warnings io.Writer
	gen      int // the generation this rank is a member of
	// transport is Options.Transport: what each generation dials (tcp,
	// shm, or auto's choice for the generation's members).
	transport string
	// name is this rank's job-wide identity in the store's keys and the
	// plans: its rank at the job's start, or for a rank started to join a
	// running job (survive_join.go) a name no earlier rank had.
	name    int
	joining bool  // started to join: Connect waits for a plan that takes it in
	joined  []int // the ranks, in the current generation, that joined at its start
}

// RevokedError is a rank's removal from the job: the plan of a later
// generation left it out.
type RevokedError struct {
	Rank, Gen int
	Reason    string
}

func (e *RevokedError) Error() string {
	return fmt.Sprintf("rank %d was removed from the job at generation %d (%s): a removed rank cannot come back without healing; exiting",
		e.Rank, e.Gen, e.Reason)
}

// FallBackError is a plan that does not continue: the launcher restarts
// the job from its checkpoint (or ends it).
type FallBackError struct {
	Gen    int
	Reason string
}

func (e *FallBackError) Error() string {
	return fmt.Sprintf("the job does not continue at generation %d: %s; the launcher falls back to a checkpoint restart", e.Gen, e.Reason)
}

// FaultError is what Watch aborts a group with: generation Gen's fault
// key was set.
type FaultError struct {
	Gen    int
	Reason string
}

func (e *FaultError) Error() string {
	return fmt.Sprintf("generation %d of the job failed: %s", e.Gen, e.Reason)
}

// SurviveEnv reports whether getenv's launcher coordinates
// surviving ranks (EnvOnFailure=continue).
func SurviveEnv(getenv func(string) string) bool {
	return strings.TrimSpace(getenv(EnvOnFailure)) == OnFailureContinue
}

// NewSurvivor connects rank env (opts as for Connect) to the store its
// launcher hosts.
func NewSurvivor(ctx context.Context, opts Options) (*Survivor, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if opts.Env == nil {
		return nil, errors.New("launch: a survivor needs its rank's environment")
	}
	env := *opts.Env
	if opts.Getenv == nil {
		_ = os.Unsetenv(EnvSecret) // as Connect: env holds it
	}
	rs, err := resolveRank(opts, getenv, env)
	if err != nil {
		return nil, err
	}
	s := &Survivor{start: env, rs: rs, warnings: opts.Warnings, name: env.Rank}
	if err := s.joinName(getenv); err != nil {
		return nil, err
	}
	s.transport = opts.Transport
	if s.store, err = rendezvous.DialStore(ctx, env.MasterHostPort(), rs.storeConfig(env)); err != nil {
		return nil, fmt.Errorf("launch: rank %d (%s): the launcher's store: %w", s.name, s.role(), err)
	}
	return s, nil
}

// Close closes the store client.
func (s *Survivor) Close() error { return s.store.Close() }

// Connect dials generation 0: the job's world of ranks ranks, this
// process's one endpoint.
func (s *Survivor) Connect(ctx context.Context, ranks int) ([]transport.Conn, error) {
	if ranks != s.start.WorldSize {
		return nil, fmt.Errorf("%d ranks asked for, the launcher's world has %d", ranks, s.start.WorldSize)
	}
	if s.joining {
		return s.join(ctx)
	}
	c, err := s.dial(ctx, 0, nil, nil)
	if err != nil {
		return nil, err
	}
	return []transport.Conn{c}, nil
}

// dial connects generation gen's endpoint — members by their rank at the
// job's start, nil for the start's — over the job's transport: tcp, shm or auto's choice for the generation's
// members, on nodes as the plan places them (nil: as named). Everything it names is keyed by the generation's run id — the
// store keys, tcp's handshake, shm's sockets and segments, auto's host
// table — so that an old generation's traffic cannot mix with the new.
func (s *Survivor) dial(ctx context.Context, gen int, members, nodes []int) (transport.Conn, error) {
	env := s.start
	if members != nil {
		env = generationEnv(s.start, s.name, members, nodes)
	}
	runID := rendezvous.GenerationRunID(s.rs.runID, gen)
	cfg := s.rs.tcpConfig(env, s.store, runID, s.warnings)
	kind, hosts, err := chooseTransport(ctx, s.transport, s.store, env, runID)
	var c Endpoint
	if err == nil {
		c, err = dialEndpoint(ctx, kind, cfg, hosts)
	}
	if err != nil {
		return nil, fmt.Errorf("launch: generation %d: %w", gen, err)
	}
	return &Conn{Endpoint: c}, nil // the store outlives the generation
}

func (s *Survivor) key(gen int, name string) string {
	return rendezvous.GenerationKey(s.rs.runID, gen, name)
}

// checkIn says that this rank is alive after generation gen's fault.
func (s *Survivor) checkIn(ctx context.Context, gen int) error {
	return s.store.Set(ctx, s.key(gen, "alive/"+strconv.Itoa(s.name)), []byte(strconv.Itoa(os.Getpid())))
}

// Watch watches the current generation's fault key: once it is set, the
// rank checks in and abort is called with a *FaultError (or with the
// store's error, should the launcher's store fail). stop ends the watch
// and waits for it.
func (s *Survivor) Watch(abort func(error)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	gen := s.gen
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			v, err := s.store.Get(ctx, s.key(gen, "fault"))
			switch {
			case err == nil:
				// Not under ctx: stop may come while the check-in is on
				// its way, and the check-in must still arrive.
				in, cancel := context.WithTimeout(context.Background(), s.rs.connectTimeout)
				_ = s.checkIn(in, gen)
				cancel()
				abort(&FaultError{Gen: gen, Reason: untrusted.Text(string(v), maxShownText)})
				return
			case ctx.Err() != nil:
				return
			case errors.Is(err, rendezvous.ErrTimeout):
				continue
			default:
				abort(fmt.Errorf("launch: the launcher's store: %w", err))
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Rejoin takes this rank from its failed generation to the next: it
// reports cause as the generation's fault (unless one was), checks in,
// waits for the launcher's plan and dials the new generation's mesh. A
// fault of the new generation while its mesh forms (a member lost
// meanwhile: its fault key set, or the dial failed) goes on to the
// generation after; generations that fail with every rank checking in
// fall back to a restart (maxIdleGenerations).
func (s *Survivor) Rejoin(ctx context.Context, cause error) (transport.Conn, rendezvous.Generation, error) {
	for {
		p, err := s.nextPlan(ctx, cause)
		if err != nil {
			return nil, rendezvous.Generation{}, err
		}
		rank := p.index(s.name)
		s.gen, s.joined = p.Gen, p.joinedRanks()
		dctx, cancel := context.WithCancelCause(ctx)
		stop := s.Watch(cancel)
		c, err := s.dial(dctx, p.Gen, p.Members, p.Nodes)
		stop()
		cancel(nil)
		if err == nil {
			return c, rendezvous.Generation{Number: p.Gen, Rank: rank, Size: len(p.Members), StartRank: s.name, Lost: p.lostRanks()}, nil
		}
		var fe *FaultError
		switch {
		case errors.As(context.Cause(dctx), &fe):
			cause = fe
		case ctx.Err() != nil:
			return nil, rendezvous.Generation{}, err
		default:
			// A member died while the mesh formed (before anyone set the
			// fault key): that is the new generation's fault.
			cause = err
		}
	}
}

// nextPlan reports cause as the current generation's fault, checks in and
// returns the launcher's plan of the next generation, in which this rank
// is a member.
func (s *Survivor) nextPlan(ctx context.Context, cause error) (genPlan, error) {
	gen := s.gen
	reason := fmt.Sprintf("rank %d: %v", s.name, cause)
	if err := s.store.Set(ctx, s.key(gen, "fault"), []byte(reason)); err != nil {
		return genPlan{}, fmt.Errorf("launch: reporting generation %d's fault: %w", gen, err)
	}
	if err := s.checkIn(ctx, gen); err != nil {
		return genPlan{}, fmt.Errorf("launch: checking in after generation %d's fault: %w", gen, err)
	}
	wait, cancel := context.WithTimeout(ctx, s.rs.connectTimeout)
	defer cancel()
	b, err := s.store.Get(wait, s.key(gen+1, "plan"))
	if err != nil {
		return genPlan{}, fmt.Errorf("launch: waiting for the launcher's plan of generation %d: %w", gen+1, err)
	}
	p, err := decodeGenPlan(b, gen+1, s.start.WorldSize)
	switch {
	case err != nil:
		return p, fmt.Errorf("launch: %w", err)
	case p.Restart != "":
		return p, &FallBackError{Gen: gen + 1, Reason: p.Restart}
	case p.index(s.name) < 0:
		return p, &RevokedError{Rank: s.name, Gen: gen + 1, Reason: p.lostReason(s.name)}
	}
	return p, nil
}
