package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/zero"
)

// Survivors continue: -on-failure continue makes a multi-process job's
// launcher (tcp, shm or auto) keep the job running when a rank fails
// (launch.Elastic.Continue; the ranks' side is trainer.Config.Survive):
// the survivors go on from memory as the
// next generation of the group, down to -min-ranks, and each failure is
// reported as a text line or, with -json, a JSON line told from the
// epochs' and the restarts' by its "continued" key (docs/elastic.md).

const onFailureUsage = "with -transport tcp, shm or auto (with -nnodes: tcp or auto): what the launcher does when a rank fails or stalls past -timeout: " +
	"restart (stop every rank; with -max-restarts start the job again from the newest checkpoint) or continue " +
	"(the survivors drop the step in flight, regroup and redo it from memory, keeping the global batch and the data order, " +
	"down to -min-ranks; below it, or when the survivors are more than the batch's examples, as restart; ZeRO-1 runs continue with " +
	"-zero-buddies, else restart)"

const zeroBuddiesUsage = "with -zero1 and -on-failure continue (on by default there; given, also with restart): each rank also holds " +
	"its ring neighbour's optimizer shard, replaying its update every step, so the survivors of a failure rebuild a lost shard " +
	"and lose no step (two neighbours lost: checkpoint restart); not with -overlap-optimizer. -zero-buddies=false: a ZeRO-1 " +
	"failure restarts from the checkpoint"

// zeroBuddiesFlag is whether ranks hold buddy copies of ZeRO-1 shards:
// with -zero1, under -on-failure continue unless -zero-buddies=false, or
// when -zero-buddies is given.
func zeroBuddiesFlag(v *flagValues, given map[string]bool) (bool, error) {
	if given["zero-buddies"] && v.zeroBuddies && !v.zero1 {
		return false, errors.New("-zero-buddies applies with -zero1 only (plain DDP holds the whole optimizer state on every rank)")
	}
	return v.zero1 && v.zeroBuddies && (v.onFailure == launch.OnFailureContinue || given["zero-buddies"]), nil
}

// onFailureFlag checks -on-failure.
func onFailureFlag(tr *launch.Transport, v string, zero1 bool, given map[string]bool) (string, error) {
	switch {
	case v != launch.OnFailureRestart && v != launch.OnFailureContinue:
		return "", fmt.Errorf("-on-failure %q: want %s or %s", v, launch.OnFailureRestart, launch.OnFailureContinue)
	case v == launch.OnFailureRestart:
		return v, nil
	case tr.MP == nil:
		return "", fmt.Errorf("-on-failure continue applies to -transport tcp, shm or auto only (in process a failure is the whole job's)")
	case zero1:
		// ZeRO-1 without buddies: a lost shard needs a checkpoint.
		return launch.OnFailureRestart, nil
	}
	return v, nil
}

// survives reports whether this job's survivors continue after a failure.
func (o *options) survives() bool { return o.onFailure == launch.OnFailureContinue }

// continueOn sets e up for survivors continuing: every survivor needs an
// example of the global batch (a world that does not divide it is split
// unevenly: trainer/split.go), and each failure survived is reported.
func (o *options) continueOn(e *launch.Elastic) {
	e.Continue = true
	e.Heal, e.Spares = o.heal || o.spares > 0, o.spares
	e.JobID = o.jobID // node 0's, carried to the other nodes' ranks
	batch := o.cfg.GlobalBatch
	e.Fits = func(n int) error {
		if batch < n {
			return fmt.Errorf("the global batch %d is smaller than the %d ranks left", batch, n)
		}
		return nil
	}
	if o.zeroBuddies {
		e.Survives = buddiesKept(generationOffset(o.cfg.BuddyNodes.Nodes >= 2 && o.cfg.BuddyNodes.Ranks >= 2))
	}
	e.OnContinue = func(w io.Writer, c launch.Continued) { printContinued(w, c, batch, o.json) }
}

// generationOffset is the buddy offset the ranks of a generation wrap
// ZeRO-1 with (trainer.Config.BuddyNodes), from its members' nodes (nil
// on one host): zero.NodesOffset across node launchers, else 1.
func generationOffset(acrossNodes bool) func(nodes []int) int {
	return func(nodes []int) int {
		if !acrossNodes || nodes == nil {
			return 1
		}
		return zero.NodesOffset(nodes)
	}
}

// buddiesKept is the launcher's judgement of a ZeRO-1 run with buddies:
// why it cannot continue after losing lost of members (job-wide names, in
// the generation's order, on nodes: nil on one host), or nil. offset is
// the generation's buddy offset d (rank i's shard has its only copy on
// rank i+d of the generation), the one its ranks wrap with: a lost rank
// whose buddy was lost too has no copy left (zero.ShardsKept).
func buddiesKept(offset func(nodes []int) int) func(members, nodes, lost []int) error {
	return func(members, nodes, lost []int) error {
		n := len(members)
		if n < 2 {
			return nil
		}
		d := offset(nodes)
		idx := make([]int, 0, len(lost))
		for _, l := range lost {
			if i := slices.Index(members, l); i >= 0 {
				idx = append(idx, i)
			}
		}
		i, j, gone := zero.LostBuddyPair(n, d, idx)
		if !gone {
			return nil
		}
		kind := "ring neighbours"
		if d != 1 {
			kind = fmt.Sprintf("a rank and its buddy %d ranks on", d)
		}
		m, b := members[i], members[j]
		return fmt.Errorf("ranks %d and %d, %s, were both lost: rank %d's ZeRO-1 optimizer shard had its only copy on rank %d (-zero-buddies)", m, b, kind, m, b)
	}
}

// continueRecord is a failure survived in -json output. It keeps the
// fields of a restart's record (restartRecord) that apply, with the same
// meaning: steps_lost is 0 when no completed step was lost.
type continueRecord struct {
	Continued       int    `json:"continued"` // 1 for the job's first failure survived
	Generation      int    `json:"generation"`
	FailedRank      int    `json:"failed_rank"`
	FailedPid       int    `json:"failed_pid,omitempty"`
	Reason          string `json:"reason"`
	FailedAtStep    int64  `json:"failed_at_step"`
	AtStartup       bool   `json:"at_startup"`
	PreviousRanks   int    `json:"previous_ranks"`
	Ranks           int    `json:"ranks"`
	ResumedFromStep int64  `json:"resumed_from_step"`
	Checkpoint      string `json:"checkpoint"` // always "": nothing is read back
	StepsLost       int64  `json:"steps_lost"`
	// SamplesRedone is the global batch of the step in flight, which the
	// survivors dropped and train again.
	SamplesRedone        int          `json:"samples_redone"`
	Removed              []lostRecord `json:"removed"`
	RemovedSeconds       float64      `json:"removed_seconds"`
	TrainingAgainSeconds *float64     `json:"training_again_seconds"`
	TrainingAgainUnix    *float64     `json:"training_again_unix,omitempty"`
	PausedSeconds        *float64     `json:"paused_seconds,omitempty"`
	// ReshardBytes is, under ZeRO-1, the optimizer state's bytes the
	// survivors sent to re-shard it over the new generation (all ranks
	// together; absent under DDP, or when the job ended first),
	// ReshardSentBytes each rank's part, by rank of the new generation, as
	// the ranks counted and gathered them (absent with ReshardBytes, or
	// when the ranks' parts did not reach the launcher whole).
	ReshardBytes     *int64  `json:"reshard_bytes,omitempty"`
	ReshardSentBytes []int64 `json:"reshard_sent_bytes,omitempty"`
}

type lostRecord struct {
	Rank   int    `json:"rank"`
	Pid    int    `json:"pid,omitempty"`
	Reason string `json:"reason"`
}

func newContinueRecord(c launch.Continued, batch int) continueRecord {
	first := c.Lost[0]
	rec := continueRecord{
		Continued: c.Number, Generation: c.Generation, FailedRank: first.Rank, FailedPid: first.Pid, Reason: first.Reason,
		FailedAtStep: c.Step, PreviousRanks: c.PreviousRanks, Ranks: c.Ranks, ResumedFromStep: c.Resumed,
		SamplesRedone: batch, RemovedSeconds: c.Removed.Seconds(),
	}
	if c.Resumed >= 0 && c.Step > c.Resumed {
		rec.StepsLost = c.Step - c.Resumed
	}
	for _, l := range c.Lost {
		rec.Removed = append(rec.Removed, lostRecord{Rank: l.Rank, Pid: l.Pid, Reason: l.Reason})
	}
	if !c.TrainingAgainAt.IsZero() {
		s, u, p := c.TrainingAgain.Seconds(), float64(c.TrainingAgainAt.UnixNano())/1e9, c.Paused.Seconds()
		rec.TrainingAgainSeconds, rec.TrainingAgainUnix = &s, &u
		if c.Paused > 0 {
			rec.PausedSeconds = &p
		}
	}
	if c.Reshard >= 0 {
		rec.ReshardBytes, rec.ReshardSentBytes = &c.Reshard, c.ReshardSent
	}
	return rec
}

// printContinued reports a failure survived: a JSON line with -json, else
// text.
func printContinued(w io.Writer, c launch.Continued, batch int, jsonOut bool) {
	rec := newContinueRecord(c, batch)
	if jsonOut {
		if b, err := json.Marshal(rec); err == nil {
			fmt.Fprintf(w, "%s\n", b)
		}
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "failure %d: ", rec.Continued)
	for i, l := range rec.Removed {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "rank %d (pid %d) %s", l.Rank, l.Pid, removedText(l.Reason))
	}
	if rec.FailedAtStep >= 0 {
		fmt.Fprintf(&b, " at step %d", rec.FailedAtStep)
	}
	fmt.Fprintf(&b, " (%s); continuing on %s as generation %d", launch.Count(rec.PreviousRanks, "rank"), launch.Count(rec.Ranks, "rank"), rec.Generation)
	if rec.TrainingAgainSeconds == nil {
		b.WriteString(", but the job ended before training again")
	} else {
		fmt.Fprintf(&b, " from step %d, %s lost, %d samples redone, training again %.2fs after the failure",
			rec.ResumedFromStep, launch.Count(int(rec.StepsLost), "step"), rec.SamplesRedone, *rec.TrainingAgainSeconds)
		if rec.PausedSeconds != nil {
			fmt.Fprintf(&b, " (paused %.2fs)", *rec.PausedSeconds)
		}
		if rec.ReshardBytes != nil {
			fmt.Fprintf(&b, "; optimizer state re-sharded: %d bytes", *rec.ReshardBytes)
			if rec.ReshardSentBytes != nil {
				fmt.Fprintf(&b, " (%s)", bytesByRank(rec.ReshardSentBytes))
			}
		}
	}
	fmt.Fprintln(w, b.String())
}

// removedText words a removal's reason after "rank r (pid p)".
func removedText(reason string) string {
	if strings.HasPrefix(reason, "was ") || strings.HasPrefix(reason, "exited ") {
		return reason
	}
	return "was removed: " + reason
}
