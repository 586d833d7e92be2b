package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ringddp/ringddp/internal/outfile"
	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/run/trainer"
)

// The job a run belongs to, and what -checkpoint and -resume do with it
// (docs/checkpoints.md):
//
//   - The job id is -job-id; else the environment's (RINGDDP_JOB_ID,
//     TORCHELASTIC_RUN_ID, SLURM_JOB_ID: jobIDVars); else, resuming, the
//     checkpoint's; else a new random one. This command's tcp launcher passes its job id
//     to its ranks (-job-id), which keep it through elastic restarts.
//   - -resume latest takes the newest valid checkpoint of the job in
//     -checkpoint's series; with no job id known yet, the series' job,
//     which it adopts (a series holding several jobs' checkpoints is an
//     error naming them).
//   - -resume PATH without -checkpoint keeps checkpointing into PATH's
//     series; the checkpoint's mode (-zero1) is the default like its
//     other settings.
//   - Before training, the process that writes checkpoints checks that
//     -checkpoint's directory takes a new file, and that the series holds
//     nothing the run may not replace (trainer.CheckSeries): in a fresh
//     run, no checkpoint at all; resuming, only the job's own.
//   - Resuming a checkpoint at or past -epochs has nothing to do: the run
//     says so and exits 0 without starting.

// envJobID names the job id in the environment (like -job-id).
const envJobID = "RINGDDP_JOB_ID"

// jobIDVars are the variables a job id is taken from, in order: ours, then
// the ids that torchrun (its --rdzv-id; "none" when not given) and Slurm
// keep across the restarts of one job. RINGDDP_RUN_ID is not one: it
// namespaces one attempt's rendezvous and changes with every restart.
var jobIDVars = [...]string{envJobID, "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}

// explicitJob is the job id given by -job-id or by the environment
// (jobIDVars), "" when neither names one.
func explicitJob(flagID string, getenv func(string) string) (string, error) {
	id, what := flagID, "-job-id"
	for _, k := range jobIDVars {
		if id != "" {
			break
		}
		if v := getenv(k); v != "" && v != "none" {
			id, what = v, "$"+k
		}
	}
	if err := trainer.CheckJobID(id); err != nil {
		return "", fmt.Errorf("%s %q: %v", what, id, err)
	}
	return id, nil
}

// latestCheckpoint resolves -resume latest in path's series for job (""
// when not known yet: the series' only job): the checkpoint, or "" to
// start afresh when the series holds no checkpoint, and notes on what it
// skipped.
func latestCheckpoint(path, job string) (string, []string, error) {
	files, err := trainer.ListSeries(path)
	if err != nil {
		return "", nil, fmt.Errorf("-resume latest: %w", err)
	}
	ids, jobs := trainer.SeriesJobs(files)
	if job == "" && len(ids) > 1 {
		return "", nil, fmt.Errorf("-resume latest: %s's series holds checkpoints of %d jobs, %s: give -job-id to choose, or -resume PATH",
			path, len(ids), strings.Join(jobs, ", "))
	}
	if job == "" && len(ids) == 1 {
		job = ids[0] // "" for a series of an older build: any of its checkpoints
	}
	found := trainer.NewestOf(files, job)
	if found.Path == "" && len(ids) > 0 {
		return "", nil, fmt.Errorf("-resume latest: %s's series holds no checkpoint of this job (%s), only of %s: give -resume PATH to continue one of those, or -job-id",
			path, job, strings.Join(jobs, ", "))
	}
	return found.Path, skippedNotes(found), nil
}

func skippedNotes(found trainer.FoundCheckpoint) []string {
	var notes []string
	for _, s := range found.Skipped {
		notes = append(notes, fmt.Sprintf("skipped %s: %v", s.Path, s.Err))
	}
	return notes
}

// seriesPath is the series a checkpoint file belongs to: ck.step120.safetensors
// is in ck.safetensors's; any other name is its own.
func seriesPath(path string) string {
	ext := filepath.Ext(path)
	stem := strings.TrimSuffix(path, ext)
	i := strings.LastIndex(stem, ".step")
	if i < 0 {
		return path
	}
	digits := stem[i+len(".step"):]
	if n, err := strconv.ParseInt(digits, 10, 64); err != nil || n < 0 || strconv.FormatInt(n, 10) != digits {
		return path
	}
	return stem[:i] + ext
}

// writesCheckpoints reports whether this process writes the checkpoints
// (holds rank 0) or launches the process that does on this node 0.
func writesCheckpoints(tr *launch.Transport) bool {
	switch {
	case tr.MP == nil:
		return true
	case tr.MP.Launcher:
		return tr.MP.NodeRank == 0
	}
	return tr.MP.Env.Rank == 0
}

// prepareCheckpoints, once the configuration is built, settles the job id
// and, in the process that writes checkpoints, checks -checkpoint's
// directory and series (see the top of this file). It notes what the run
// took from the -resume checkpoint.
func (o *options) prepareCheckpoints(given map[string]bool, getenv func(string) string) error {
	if o.jobID == "" {
		id, err := trainer.NewJobID()
		if err != nil {
			return err
		}
		o.jobID, o.jobIDMade = id, true
	}
	o.cfg.JobID = o.jobID
	if o.resumed != nil {
		if o.checkpointFromResume {
			o.notes = append(o.notes, fmt.Sprintf("-resume: checkpoints go to %s, the series of the checkpoint resumed (-checkpoint to change)", o.cfg.Checkpoint))
		}
		if o.resumed.Zero1 && o.cfg.Zero1 && !given["zero1"] {
			o.notes = append(o.notes, "-resume: ZeRO-1, as the checkpoint was written (-zero1=false to train with plain DDP)")
		}
		if o.resumed.Epoch >= o.cfg.Epochs {
			o.finished = fmt.Sprintf("nothing to do: %s is at the end of epoch %d and -epochs is %d, so this job is finished (give -epochs %d or more to train further)",
				o.cfg.Resume, o.resumed.Epoch, o.cfg.Epochs, o.resumed.Epoch+1)
			return nil
		}
	}
	if o.cfg.Checkpoint == "" || !writesCheckpoints(o.tr) {
		return nil
	}
	dir := filepath.Dir(o.cfg.Checkpoint)
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = outfile.CheckWritable(dir)
	}
	if err != nil && o.checkpointFromResume {
		return fmt.Errorf("-checkpoint %s (the default with -resume: give -checkpoint to write elsewhere): %w", o.cfg.Checkpoint, err)
	}
	if err != nil {
		return fmt.Errorf("-checkpoint %s: %w", o.cfg.Checkpoint, err)
	}
	restart := getenv(launch.EnvRestart)
	// A rank started to join a running job (-heal) continues the job: it
	// finds the job's own checkpoints, as a restart does.
	joining := getenv(launch.EnvJoinName) != ""
	rule := trainer.SeriesRule{Jobs: []string{o.jobID}, Fresh: o.cfg.Resume == "" && !joining, Restart: restart != "" && restart != "0" || joining}
	if o.resumed != nil {
		rule.Jobs = append(rule.Jobs, o.resumed.JobID)
	}
	err = trainer.CheckSeries(o.cfg.Checkpoint, rule)
	var c *trainer.SeriesConflict
	if !errors.As(err, &c) {
		return err
	}
	hint := "remove it or give another -checkpoint"
	switch {
	case c.Err == nil && c.Own:
		hint = "continue the job with -resume latest (or -resume " + c.Path + "), or " + hint
	case c.Err == nil:
		hint = "to continue that job, give -resume " + c.Path + "; else " + hint
	}
	return fmt.Errorf("-checkpoint: %w: %s", err, hint)
}

// withJobID is a launcher's command line for its ranks: args with -job-id
// set to this job's, so that every rank, in every restart, writes and
// looks for this job's checkpoints.
func withJobID(args []string, id string) []string {
	out := slices.Clone(args)
	return append(out, "-job-id", id)
}
