package tcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/internal/transporthelp"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/tcp"
)

// The multi-process tests re-execute this test binary as ranks: modeVar
// says what a rank runs ("mismatch" or "matrix"), trialsVar how many
// trials a "mismatch" rank runs.
const (
	modeVar   = "RINGDDP_TCP_TEST_MODE"
	trialsVar = "RINGDDP_TCP_TEST_TRIALS"
)

func TestMain(m *testing.M) {
	transporthelp.RankMain(m, modeVar, map[string]func() error{"mismatch": mismatchTrialsRank, "matrix": matrixRank})
}

// trialCounts is what one rank of the multi-process mismatch test saw.
type trialCounts struct {
	Rank, Trials, NoError, ConnectionLost, Unnamed int
	Sample                                         string
}

// mismatchTrialsRank is one rank of the multi-process mismatch test:
// trialsVar times, a fresh mesh (run id "t<i>"), a Barrier, then recursive
// doubling AllReduce(float64 × 30000, Max) with rank 3 passing 30001
// elements, then a Barrier. It prints its trialCounts as JSON.
func mismatchTrialsRank() error {
	ctx := context.Background()
	trials, err := strconv.Atoi(os.Getenv(trialsVar))
	if err != nil {
		return err
	}
	env, store, err := transporthelp.JoinFromEnv(ctx, func(env rendezvous.Env, _ *rendezvous.TCPStore) (rendezvous.Env, error) {
		return env, nil
	})
	if err != nil {
		return err
	}
	defer store.Close()
	counts := trialCounts{Rank: env.Rank, Trials: trials}
	for i := 0; i < trials; i++ {
		cfg := tcp.ConfigFromEnv(env, store)
		cfg.RunID = fmt.Sprintf("t%d", i)
		cfg.Timeout = 20 * time.Second
		conn, err := tcp.Dial(ctx, cfg)
		if err != nil {
			return fmt.Errorf("trial %d: %w", i, err)
		}
		g, err := allreduce.NewGroup(conn, allreduce.WithAlgorithm(allreduce.Doubling))
		if err != nil {
			return err
		}
		if err := allreduce.Barrier(ctx, g); err != nil {
			return fmt.Errorf("trial %d: barrier before: %w", i, err)
		}
		buf := make([]float64, 30000+env.Rank/3)
		err = allreduce.AllReduce(ctx, g, buf, allreduce.Max)
		if err == nil {
			err = allreduce.Barrier(ctx, g)
		}
		_ = g.Close()
		switch text := fmt.Sprint(err); {
		case err == nil:
			counts.NoError++
		case strings.Contains(text, "connection lost"):
			counts.ConnectionLost++
			counts.Sample = text
		case !strings.Contains(text, "rank 2 called #1 AllReduce(float64 × 30000, Max)") && !strings.Contains(text, "rank 3 called #1 AllReduce(float64 × 30001, Max)"):
			counts.Unnamed++
			counts.Sample = text
		}
	}
	if env.Rank == 0 {
		// Keep the store up until the other ranks have finished.
		if _, err := store.Add(ctx, "finished", 1); err != nil {
			return err
		}
		for {
			v, err := store.Add(ctx, "finished", 0)
			if err != nil || v >= int64(env.WorldSize) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	} else if _, err := store.Add(ctx, "finished", 1); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(counts)
}

// The reproducer, as separate processes: a rank that finds a
// mismatch while it is still sending its partner a 240 KB frame used to
// cut the frame short, so the partner (and the ranks it told) saw
// "connection lost: EOF" instead of the cause in about 0.5% of rank
// errors. Every rank's error must name the mismatched calls.
func TestMismatchAcrossProcesses(t *testing.T) {
	transporthelp.MultiProcess(t)
	trials := transporthelp.Trials(300, 2500)
	const n = 4
	outs, errs := transporthelp.RunRanks(t, n, func(r int) []string {
		return []string{modeVar + "=mismatch", trialsVar + "=" + strconv.Itoa(trials), "LOCAL_RANK=" + strconv.Itoa(r), "LOCAL_WORLD_SIZE=4"}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, outs[r])
		}
	}
	for r := range outs {
		var c trialCounts
		if err := json.Unmarshal(outs[r].Bytes(), &c); err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, outs[r])
		}
		t.Logf("rank %d: %+v", r, c)
		if c.NoError+c.ConnectionLost+c.Unnamed > 0 {
			t.Errorf("rank %d: of %d trials, %d ended without an error, %d with connection lost, %d without the calls named: %s",
				r, c.Trials, c.NoError, c.ConnectionLost, c.Unnamed, c.Sample)
		}
	}
}

// matrixRank is one rank of the multi-process algorithm matrix: for every
// algorithm a tcp group can run (the topology ones with RINGDDP_NODE as
// its node), AllReduce of awkward lengths with every op on float32 and
// int64, each result compared bit for bit with the sequential reference
// (every rank computes it from every rank's deterministic input).
func matrixRank() error {
	ctx := context.Background()
	conn, store, err := transporthelp.JoinFromEnv(ctx, func(env rendezvous.Env, store *rendezvous.TCPStore) (*tcp.Conn, error) {
		cfg := tcp.ConfigFromEnv(env, store)
		cfg.Timeout = 20 * time.Second
		return tcp.Dial(ctx, cfg)
	})
	if err != nil {
		return err
	}
	defer store.Close()
	n := conn.Size()
	algos, err := allreducetest.RankMatrix(ctx, conn, []int{0, 1, n - 1, n + 1, 1000, 70000}, nil)
	if err != nil {
		return err
	}
	g, err := allreduce.NewGroup(conn)
	if err != nil {
		return err
	}
	topo, err := g.Topology(ctx)
	if err != nil {
		return err
	}
	if want := (n + 1) / 2; topo.Nodes() != want {
		return fmt.Errorf("rank %d: topology %v, want %d nodes (RINGDDP_NODE)", conn.Rank(), topo, want)
	}
	_ = conn.Close()
	fmt.Printf("rank %d: %d algorithms ok on %v: %v\n", conn.Rank(), len(algos), topo, algos)
	return nil
}

// The reduced matrix over separate processes for every algorithm tcp can
// run: 3 processes as nodes of 2 and 1, 5 as 2, 2, 1 (RINGDDP_NODE), so
// the topology algorithms meet uneven nodes over real sockets.
func TestAlgorithmsAcrossProcesses(t *testing.T) {
	transporthelp.MultiProcess(t)
	for _, n := range []int{3, 5} {
		outs, errs := transporthelp.RunRanks(t, n, func(r int) []string {
			return []string{modeVar + "=matrix", "LOCAL_RANK=" + strconv.Itoa(r%2), "LOCAL_WORLD_SIZE=2",
				"RINGDDP_NODE=node" + strconv.Itoa(r/2)}
		})
		transporthelp.CheckRanks(t, fmt.Sprintf("%d processes", n), outs, errs)
		if !strings.Contains(outs[0].String(), "hierarchical") || !strings.Contains(outs[0].String(), "tree") {
			t.Errorf("%d processes: not every algorithm ran: %s", n, outs[0])
		}
	}
}
