package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/run/trainer"
)

// Healing: with -on-failure continue, -heal makes the launcher start a
// replacement for every rank lost (across node launchers: node 0's own
// ranks, and a live node's lost rank its launcher's, at node 0's request;
// a lost node's come back with its launcher, restarted, which rejoins the
// running job), and -spares K starts K ranks with the
// job that wait to be taken; the group grows back at a step boundary and
// the new rank is healed from the others (docs/elastic.md). Each heal is
// reported by the grown generation's rank 0 as a text line or, with
// -json, a JSON line told from the others by its "healed" key.

const healUsage = "with -on-failure continue: start a new rank for every rank lost; the group grows back at a step boundary " +
	"and the new rank receives the parameters, optimizer state and data position from the others (striped over them, SHA-256 checked, " +
	"replicas compared bitwise) before training goes on"

const sparesUsage = "with -on-failure continue: start this many extra ranks with the job, which wait ready and replace a lost rank; " +
	"a spare taken is followed by a new one, so this many stay ready (at most one new spare per rank lost; implies -heal; at most 16)"

// healFlags checks -heal and -spares; zero1NoBuddies is -zero1 with
// -zero-buddies=false (ZeRO-1 with buddies heals: survive_heal_zero.go in
// the trainer).
func healFlags(tr *launch.Transport, onFailure string, zero1NoBuddies bool, heal bool, spares int, given map[string]bool) (bool, int, error) {
	asked := given["heal"] || given["spares"]
	switch {
	// First: without buddies -on-failure continue under -zero1 was made a
	// restart (onFailureFlag), which the next case would name instead.
	case asked && (heal || spares > 0) && zero1NoBuddies:
		return false, 0, errors.New("-heal and -spares with -zero1 need -zero-buddies (without buddies a lost rank's optimizer shard is gone: the job restarts from its checkpoint, and no group is left to heal back)")
	case asked && onFailure != launch.OnFailureContinue:
		return false, 0, errors.New("-heal and -spares apply with -on-failure continue only (a restart starts every rank anew)")
	case asked && (heal || spares > 0) && tr.MP == nil:
		return false, 0, errors.New("-heal and -spares need one rank per process (-transport tcp, shm or auto)")
	case asked && spares > 0 && tr.MP.Nnodes > 1:
		return false, 0, errors.New("-spares applies on one host (-nnodes 1): across node launchers a lost node's ranks come back with its launcher (-heal)")
	case spares < 0 || spares > 16:
		return false, 0, fmt.Errorf("-spares %d: want 0..16", spares)
	}
	return heal || spares > 0, spares, nil
}

// healRecord is a heal in -json output.
type healRecord struct {
	Healed     int          `json:"healed"` // the generation the joined ranks are members of
	Joined     []joinRecord `json:"joined"`
	AtStep     int64        `json:"at_step"` // the global step training goes on from
	StepsLost  int64        `json:"steps_lost"`
	Paused     float64      `json:"paused_seconds"` // rank 0's pause: the grow's abort to the state agreed
	HealSecs   float64      `json:"heal_seconds"`   // the transfer and the checks
	StateBytes int64        `json:"state_bytes"`
	// SentBytes is what each rank sent to heal, by its rank in the
	// generation (0 for a joiner).
	SentBytes     []int64 `json:"sent_bytes"`
	SamplesRedone int     `json:"samples_redone"` // the step in flight, dropped and trained again
	// ReshardBytes is, under ZeRO-1, the optimizer state's bytes sent to
	// re-shard it over the grown group, beside heal's stream (0 under
	// DDP), ReshardSentBytes each rank's part (absent under DDP).
	ReshardBytes     int64   `json:"reshard_bytes"`
	ReshardSentBytes []int64 `json:"reshard_sent_bytes,omitempty"`
	// ParamsHeldBytes is, under ZeRO-1, the parameters' bytes heal's
	// stream left out (state_bytes does not count them): the joiners
	// received them with the re-shard's all-gather, and heal's replica
	// check compared them (0 under DDP).
	ParamsHeldBytes int64 `json:"params_held_bytes,omitempty"`
}

type joinRecord struct {
	Rank int    `json:"rank"` // in the generation
	Name int    `json:"name"` // job-wide
	Pid  int    `json:"pid,omitempty"`
	Why  string `json:"why"`
	// Node, across node launchers, is the node it runs on (absent on one
	// host): a rejoining node's ranks name it.
	Node *int `json:"node,omitempty"`
	// BackSeconds is from the launcher starting its process (a rejoining
	// node's: node 0 admitting its launcher) to its state
	// healed, ReadySeconds from the launcher seeing it ready (data loaded,
	// store reached) to its state healed (null when unknown).
	BackSeconds  *float64 `json:"back_seconds"`
	ReadySeconds *float64 `json:"ready_to_healed_seconds"`
}

// printHealed reports heal h on rank 0's stdout.
func printHealed(ctx context.Context, w io.Writer, surv *launch.Survivor, h trainer.Healed, o *options) {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	gen, joined, _ := surv.JoinedInfo(ictx)
	rec := healRecord{Healed: gen, AtStep: h.GlobalStep, Paused: h.Paused.Seconds(), HealSecs: h.Heal.Seconds(),
		StateBytes: h.Report.StateBytes, SentBytes: h.Report.Sent, SamplesRedone: o.cfg.GlobalBatch,
		ReshardSentBytes: h.ReshardSent, ParamsHeldBytes: h.Report.HeldBytes}
	for _, n := range h.ReshardSent {
		rec.ReshardBytes += n
	}
	for _, r := range h.Joined {
		jr := joinRecord{Rank: r, Name: -1}
		for _, j := range joined {
			if j.Rank == r {
				jr.Name, jr.Pid, jr.Why = j.Name, j.Pid, j.Why
				if j.Node >= 0 {
					jr.Node = &j.Node
				}
				jr.BackSeconds, jr.ReadySeconds = secondsSince(j.Started), secondsSince(j.Ready)
			}
		}
		rec.Joined = append(rec.Joined, jr)
	}
	if o.json {
		if b, err := json.Marshal(rec); err == nil {
			fmt.Fprintf(w, "%s\n", b)
		}
		return
	}
	fmt.Fprintln(w, healText(rec))
}

// healText words a heal: "heal at generation 2: rank 4 (pid 77, replaces
// rank 2, which was killed by signal killed) joined as rank 3, back 0.61s
// after its start; training goes on from step 12, 0 steps lost, 24 samples
// redone, paused 0.35s (heal 0.02s: 98,304 bytes, 32,768 from each of 3 ranks)".
func healText(rec healRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "heal at generation %d: ", rec.Healed)
	for i, j := range rec.Joined {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "rank %d (pid %d, %s) joined as rank %d", j.Name, j.Pid, j.Why, j.Rank)
		if j.Node != nil {
			fmt.Fprintf(&b, " on node %d", *j.Node)
		}
		if j.BackSeconds != nil && j.ReadySeconds != nil {
			fmt.Fprintf(&b, ", back %.2fs after its start (%.2fs after it was ready)", *j.BackSeconds, *j.ReadySeconds)
		}
	}
	fmt.Fprintf(&b, "; training goes on from step %d, %s lost, %d samples redone, paused %.2fs (heal %.2fs: %d bytes of state; bytes sent: %s)",
		rec.AtStep, launch.Count(int(rec.StepsLost), "step"), rec.SamplesRedone, rec.Paused, rec.HealSecs, rec.StateBytes, bytesByRank(rec.SentBytes))
	if rec.ReshardSentBytes != nil {
		fmt.Fprintf(&b, "; optimizer state re-sharded: %d bytes (%s)", rec.ReshardBytes, bytesByRank(rec.ReshardSentBytes))
	}
	if rec.ParamsHeldBytes > 0 {
		fmt.Fprintf(&b, "; parameters assembled with the re-shard, not in heal's stream: %d bytes", rec.ParamsHeldBytes)
	}
	return b.String()
}

// bytesByRank words the ranks that sent bytes, by rank: "rank 1 40, rank
// 3 16" (ranks that sent none left out).
func bytesByRank(sent []int64) string {
	var parts []string
	for r, n := range sent {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("rank %d %d", r, n))
		}
	}
	return strings.Join(parts, ", ")
}

// secondsSince is the time since t in seconds; nil when t is unknown.
func secondsSince(t time.Time) *float64 {
	if t.IsZero() || t.UnixNano() <= 0 {
		return nil
	}
	s := time.Since(t).Seconds()
	return &s
}
