package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// A rank that joins a running job (healing, docs/elastic.md). The launcher
// starts it with EnvJoinName set to a name no rank of the job had — a
// replacement for a lost rank, or a spare started with the job
// (-spares) — and its Survivor's Connect, instead of dialling generation
// 0:
//
//  1. announces it at its join key (its pid): the process has loaded its
//     data and reached the job's store, so it is ready;
//  2. waits, as long as its context allows, for the launcher to write at
//     its join-generation key the generation that takes it in (a plan
//     whose Joined names it, published at a step boundary: survive_grow.go);
//  3. reads and checks that plan and dials the generation's mesh as the
//     rank the plan gives it, from then on a member like any other.
//
// The joiner holds no state: the trainer heals it from the members
// (internal/run/heal) before the generation trains.

// EnvJoinName is a joining rank's job-wide name (survive_join.go).
const EnvJoinName = "RINGDDP_JOIN_NAME"

// maxJoiners is how many ranks one attempt of a job may start to join it:
// their names are world..world+maxJoiners-1.
const maxJoiners = 64

// joinInfo describes a joined rank in a plan.
type joinInfo struct {
	Name    int    `json:"name"`
	Pid     int    `json:"pid"`
	Started int64  `json:"started_unix_nano"` // when the launcher started its process
	Ready   int64  `json:"ready_unix_nano"`   // when the launcher saw it ready (its join key)
	Why     string `json:"why"`
	// Node, with several nodes, is the node whose launcher started it
	// (nil on one host).
	Node *int `json:"node,omitempty"`
}

// Joined is a rank that joined the current generation at its start.
type Joined struct {
	Rank, Name, Pid int       // its rank in the generation, its job-wide name, its process
	Started, Ready  time.Time // its process started; the launcher saw it ready
	Why             string    // "replaces rank 2 (...)", "spare"
	Node            int       // with several nodes, the node it runs on; -1 on one host
}

// joinName reads EnvJoinName: a joining rank's name.
func (s *Survivor) joinName(getenv func(string) string) error {
	v := strings.TrimSpace(getenv(EnvJoinName))
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < s.start.WorldSize || n >= s.start.WorldSize+maxJoiners {
		return fmt.Errorf("launch: %s=%q: want a joining rank's name, %d..%d", EnvJoinName, v, s.start.WorldSize, s.start.WorldSize+maxJoiners-1)
	}
	s.name, s.joining = n, true
	return nil
}

// role words what this rank is, for messages: "rank 2 of 4 at the start",
// "started to join".
func (s *Survivor) role() string {
	if s.joining {
		return "started to join"
	}
	return fmt.Sprintf("rank %d of %d at the start", s.start.Rank, s.start.WorldSize)
}

// Joining reports whether this rank was started to join a running job.
func (s *Survivor) Joining() bool { return s.joining }

// JoinedRanks are the ranks, in the current generation, that joined at its
// start (none when the generation only lost ranks).
func (s *Survivor) JoinedRanks() []int { return slices.Clone(s.joined) }

// Name is this rank's job-wide name.
func (s *Survivor) Name() int { return s.name }

func joinKeyName(name int) string { return "join/" + strconv.Itoa(name) }

// join is a joining rank's Connect (steps 1-3 above).
func (s *Survivor) join(ctx context.Context) ([]transport.Conn, error) {
	if err := s.store.Set(ctx, s.key(0, joinKeyName(s.name)), []byte(strconv.Itoa(os.Getpid()))); err != nil {
		return nil, fmt.Errorf("launch: rank %d announcing itself to join: %w", s.name, err)
	}
	var v []byte
	for {
		var err error
		v, err = s.store.Get(ctx, s.key(0, joinKeyName(s.name)+"/gen"))
		if err == nil {
			break
		}
		if !errors.Is(err, rendezvous.ErrTimeout) || ctx.Err() != nil {
			return nil, fmt.Errorf("launch: rank %d waiting to be taken into the job: %w", s.name, err)
		}
	}
	gen, err := strconv.Atoi(string(v))
	if err != nil || gen < 1 {
		return nil, fmt.Errorf("launch: rank %d: the generation to join is %q: want a number of 1 or more", s.name, v)
	}
	b, err := s.store.Get(ctx, s.key(gen, "plan"))
	if err != nil {
		return nil, fmt.Errorf("launch: rank %d: the plan of generation %d: %w", s.name, gen, err)
	}
	p, err := decodeGenPlan(b, gen, s.start.WorldSize)
	switch {
	case err != nil:
		return nil, fmt.Errorf("launch: %w", err)
	case p.Restart != "":
		return nil, &FallBackError{Gen: gen, Reason: p.Restart}
	case !slices.Contains(p.Joined, s.name):
		return nil, fmt.Errorf("launch: rank %d: the plan of generation %d does not take it in", s.name, gen)
	}
	s.gen, s.joined = gen, p.joinedRanks()
	c, err := s.dial(ctx, gen, p.Members, p.Nodes)
	if err != nil {
		return nil, err
	}
	return []transport.Conn{c}, nil
}

// JoinedInfo is the current generation and the ranks that joined it, as
// its plan says (for the heal's report).
func (s *Survivor) JoinedInfo(ctx context.Context) (int, []Joined, error) {
	b, err := s.store.Get(ctx, s.key(s.gen, "plan"))
	if err != nil {
		return s.gen, nil, err
	}
	p, err := decodeGenPlan(b, s.gen, s.start.WorldSize)
	if err != nil {
		return s.gen, nil, err
	}
	out := make([]Joined, len(p.Joined))
	for i, name := range p.Joined {
		out[i] = Joined{Rank: p.index(name), Name: name, Node: -1}
		if i < len(p.Joins) {
			j := p.Joins[i]
			out[i].Pid, out[i].Started, out[i].Ready, out[i].Why = j.Pid, time.Unix(0, j.Started), time.Unix(0, j.Ready), j.Why
			if j.Node != nil && *j.Node >= 0 && *j.Node < maxNodeRanks {
				out[i].Node = *j.Node
			}
		}
	}
	return s.gen, out, nil
}
