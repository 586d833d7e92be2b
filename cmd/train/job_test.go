package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/run/trainer"
)

func ckInfo(t *testing.T, path string) trainer.CheckpointInfo {
	t.Helper()
	info, err := trainer.ReadCheckpointInfo(path)
	require.NoError(t, err)
	return info
}

// Issue #32's story: a run leaves ck.safetensors (at step 30 here, 300
// there); a new elastic run given the same -checkpoint is refused before
// any rank starts, naming the file, its job and step and what to do,
// instead of "resuming from step 30" after its first failure.
func TestElasticRefusesAnotherJobsCheckpoint(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	common := []string{"-data", data, "-batch", "20", "-epochs", "2", "-hidden", "8", "-eval-batch", "25"}
	out, err := runTrain(t, append([]string{"-ranks", "2", "-checkpoint", ck, "-max-steps", "30"}, common...)...)
	require.NoError(t, err, out)
	first := ckInfo(t, ck)
	require.Equal(t, int64(30), first.GlobalStep)
	require.Contains(t, out, "checkpoint: "+ck+" (job "+first.JobID+")")

	t.Setenv(faultsVar, "kill:1:7:0")
	start := time.Now()
	out, err = runTrain(t, append([]string{"-transport", "tcp", "-ranks", "2", "-checkpoint", ck,
		"-checkpoint-every", "5", "-max-restarts", "1", "-json"}, common...)...)
	require.Error(t, err, out)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Empty(t, out, "nothing trained")
	for _, want := range []string{ck, "holds a checkpoint written by another job", "job " + first.JobID, "global step 30",
		"to continue that job, give -resume " + ck, "remove it or give another -checkpoint"} {
		require.Contains(t, err.Error(), want)
	}
	require.Equal(t, first, ckInfo(t, ck), "the other job's checkpoint is untouched")

	// The same in process, and for an own-job series without -resume.
	_, err = runTrain(t, append([]string{"-ranks", "2", "-checkpoint", ck}, common...)...)
	require.ErrorContains(t, err, "written by another job")
	_, err = runTrain(t, append([]string{"-ranks", "2", "-checkpoint", ck, "-job-id", first.JobID}, common...)...)
	require.ErrorContains(t, err, "holds a checkpoint of this job ("+first.JobID+")")
	require.ErrorContains(t, err, "continue the job with -resume latest")
}

// An elastic job keeps its job id through restarts: every checkpoint of
// its series carries the launcher's, and the restart chooses among them
// only (a newer checkpoint of another job in the series is skipped and
// named).
func TestElasticRestartChoosesOwnJob(t *testing.T) {
	data := writeMNISTDir(t)
	dir := t.TempDir()
	other := filepath.Join(dir, "other.safetensors")
	common := []string{"-data", data, "-batch", "20", "-epochs", "2", "-hidden", "8", "-eval-batch", "25"}
	_, err := runTrain(t, append([]string{"-ranks", "2", "-checkpoint", other, "-max-steps", "30"}, common...)...)
	require.NoError(t, err)
	foreign := ckInfo(t, other)

	ck := filepath.Join(dir, "ck.safetensors")
	t.Setenv(faultsVar, "kill:1:13:0")
	out, err := runTrain(t, append([]string{"-transport", "tcp", "-ranks", "2", "-checkpoint", ck, "-job-id", "job-elastic",
		"-checkpoint-every", "5", "-checkpoint-keep", "100", "-max-restarts", "1", "-json"}, common...)...)
	require.NoError(t, err, out)
	_, restarts := jobOutput(t, out)
	require.Len(t, restarts, 1, out)
	require.Equal(t, int64(10), restarts[0].ResumedFromStep)
	files, err := trainer.ListSeries(ck)
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		require.NoError(t, f.Err)
		require.Equal(t, "job-elastic", f.Info.JobID, f.Path)
	}

	// The restart's choice, with the other job's step-30 checkpoint
	// dropped into the series as step 35's: it takes the job's newest.
	b, err := os.ReadFile(other)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(trainer.StampedCheckpoint(ck, 35), b, 0o600))
	o := &options{jobID: "job-elastic"}
	o.cfg.Checkpoint, o.cfg.GlobalBatch = ck, 20
	r, err := o.prepareRestart([]string{"-x"}, launch.Attempt{Restart: 1, MinRanks: 2, MaxRanks: 2})
	require.NoError(t, err)
	require.Equal(t, trainer.StampedCheckpoint(ck, 40), r.From)
	require.Equal(t, int64(40), r.Step)
	require.Contains(t, strings.Join(r.Notes, "\n"), "written by another job "+foreign.JobID+" at global step 30")

	// -resume latest in the same series: this job's newest; with no job
	// known, the series' two jobs are named; another job's id finds none.
	path, notes, err := latestCheckpoint(ck, "job-elastic")
	require.NoError(t, err)
	require.Equal(t, trainer.StampedCheckpoint(ck, 40), path)
	require.Contains(t, strings.Join(notes, "\n"), foreign.JobID)
	_, _, err = latestCheckpoint(ck, "")
	require.ErrorContains(t, err, "holds checkpoints of 2 jobs, job-elastic (newest step 40), "+foreign.JobID+" (newest step 30): give -job-id to choose, or -resume PATH")
	_, _, err = latestCheckpoint(ck, "job-zzz")
	require.ErrorContains(t, err, "holds no checkpoint of this job (job-zzz)")
}

// -resume PATH keeps checkpointing into PATH's series and takes the
// checkpoint's ZeRO-1 mode, saying both; -zero1=false given overrides it.
func TestResumeKeepsCheckpointingAndMode(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	common := []string{"-data", data, "-epochs", "1"}
	out, err := runTrain(t, append([]string{"-ranks", "2", "-batch", "20", "-hidden", "8", "-optim", "adam", "-zero1",
		"-checkpoint", ck, "-checkpoint-every", "5", "-max-steps", "5"}, common...)...)
	require.NoError(t, err, out)
	require.True(t, ckInfo(t, ck).Zero1)

	stamped := trainer.StampedCheckpoint(ck, 5)
	out, err = runTrain(t, append([]string{"-resume", stamped, "-max-steps", "8"}, common...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "-resume: checkpoints go to "+ck+", the series of the checkpoint resumed (-checkpoint to change)")
	require.Contains(t, out, "-resume: ZeRO-1, as the checkpoint was written (-zero1=false to train with plain DDP)")
	require.Contains(t, out, "with ZeRO-1 on 2 inproc ranks")
	info := ckInfo(t, ck)
	require.Equal(t, int64(8), info.GlobalStep)
	require.True(t, info.Zero1)

	out, err = runTrain(t, append([]string{"-resume", ck, "-zero1=false", "-max-steps", "10"}, common...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "with DDP on 2 inproc ranks")
	require.NotContains(t, out, "-resume: ZeRO-1")
	require.False(t, ckInfo(t, ck).Zero1)
}

// -resume latest on a finished series says so and exits 0, before any
// plan or epoch line.
func TestResumeLatestFinished(t *testing.T) {
	data := writeMNISTDir(t)
	ck := filepath.Join(t.TempDir(), "ck.safetensors")
	common := []string{"-data", data, "-ranks", "2", "-batch", "40", "-hidden", "8", "-epochs", "1", "-checkpoint", ck}
	_, err := runTrain(t, common...)
	require.NoError(t, err)
	out, err := runTrain(t, append(common, "-resume", "latest")...)
	require.NoError(t, err)
	require.Equal(t, "nothing to do: "+ck+" is at the end of epoch 1 and -epochs is 1, so this job is finished (give -epochs 2 or more to train further)\n", out)
}

// An unusable -checkpoint directory is an error naming it before
// training starts.
func TestCheckpointDirCheckedFirst(t *testing.T) {
	data := writeMNISTDir(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	ck := filepath.Join(file, "ck.safetensors")
	out, err := runTrain(t, "-data", data, "-ranks", "2", "-batch", "40", "-hidden", "8", "-epochs", "1", "-checkpoint", ck)
	require.ErrorContains(t, err, "-checkpoint "+ck)
	require.ErrorContains(t, err, "not a directory")
	require.Empty(t, out)

	if os.Geteuid() == 0 {
		return // root writes a read-only directory
	}
	ro := filepath.Join(dir, "ro")
	require.NoError(t, os.Mkdir(ro, 0o755))
	src := filepath.Join(ro, "ck.safetensors")
	_, err = runTrain(t, "-data", data, "-ranks", "2", "-batch", "40", "-hidden", "8", "-epochs", "2", "-max-steps", "3", "-checkpoint", src)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(ro, 0o555))
	t.Cleanup(func() { _ = os.Chmod(ro, 0o755) })
	_, err = runTrain(t, "-data", data, "-resume", src)
	require.ErrorContains(t, err, "-checkpoint "+src+" (the default with -resume: give -checkpoint to write elsewhere): directory "+ro+" is not writable")
}

// Symbolic links planted at every output path (an attacker's links into
// files of the user's) are replaced by the run's files, never followed;
// checkpoints are private, the other outputs 0644 (under umask 022).
func TestOutputsReplaceSymlinks(t *testing.T) {
	data := writeMNISTDir(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("precious"), 0o644))
	out := filepath.Join(dir, "out")
	require.NoError(t, os.Mkdir(out, 0o755))
	ck := filepath.Join(dir, "ck.safetensors")
	shared := []string{filepath.Join(out, metricsFile), filepath.Join(out, plotFile), filepath.Join(out, breakdownFile),
		filepath.Join(dir, "run.json"), filepath.Join(dir, "cpu.pprof")}
	for _, p := range shared {
		require.NoError(t, os.Symlink(victim, p))
	}
	// At the checkpoint, a dangling link: a file the attacker wants made.
	made := filepath.Join(dir, "made-by-victim")
	require.NoError(t, os.Symlink(made, ck))
	stdout, err := runTrain(t, "-data", data, "-ranks", "2", "-batch", "40", "-hidden", "8", "-epochs", "1", "-quiet",
		"-out", out, "-trace", shared[3], "-cpuprofile", shared[4], "-checkpoint", ck)
	require.NoError(t, err, stdout)
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, "precious", string(b))
	_, err = os.Lstat(made)
	require.True(t, errors.Is(err, os.ErrNotExist), "the dangling link was followed")
	for _, p := range append(shared, ck) {
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		require.True(t, fi.Mode().IsRegular(), "%s is %v", p, fi.Mode())
		require.NotZero(t, fi.Size(), p)
		require.Zero(t, fi.Mode().Perm()&0o022, "%s is group or world writable", p)
	}
	fi, err := os.Stat(ck)
	require.NoError(t, err)
	require.Zero(t, fi.Mode().Perm()&0o077, "the checkpoint is readable by others: %v", fi.Mode().Perm())
}

// The job id comes from -job-id, else RINGDDP_JOB_ID, torchrun's or
// Slurm's id; never from RINGDDP_RUN_ID, which changes with each attempt.
func TestExplicitJob(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, tc := range []struct {
		flag string
		env  func(string) string
		want string
	}{
		{"", env(), ""},
		{"", env(launch.EnvRunID, "standalone-1234"), ""},
		{"", env("TORCHELASTIC_RUN_ID", "none"), ""},
		{"", env("TORCHELASTIC_RUN_ID", "rdzv7", "SLURM_JOB_ID", "42"), "rdzv7"},
		{"", env("SLURM_JOB_ID", "42", envJobID, "mine"), "mine"},
		{"given", env(envJobID, "mine"), "given"},
	} {
		got, err := explicitJob(tc.flag, tc.env)
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
	_, err := explicitJob("", env(envJobID, "a b"))
	require.ErrorContains(t, err, `$RINGDDP_JOB_ID "a b"`)
	_, err = explicitJob(strings.Repeat("x", 129), env())
	require.ErrorContains(t, err, "-job-id")

	require.Equal(t, "d/ck.safetensors", seriesPath("d/ck.step120.safetensors"))
	require.Equal(t, "d/ck.stepx.safetensors", seriesPath("d/ck.stepx.safetensors"))
	require.Equal(t, "d/ck.step01.safetensors", seriesPath("d/ck.step01.safetensors"))
	require.Equal(t, "ck", seriesPath("ck"))
}
