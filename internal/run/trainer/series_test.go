package trainer

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// stampedSteps lists the steps of path's stamped checkpoints.
func stampedSteps(t *testing.T, path string) []int64 {
	t.Helper()
	files, err := stampedFiles(path)
	require.NoError(t, err)
	var steps []int64
	for _, f := range files {
		steps = append(steps, f.step)
	}
	return steps
}

// CheckpointEvery writes checkpoints inside epochs as well as at their
// ends; CheckpointKeep keeps the newest under stamped names, the plain
// name the newest of all; resuming from a mid-epoch one ends bitwise where
// the uninterrupted run does, on 2 ranks, and within rounding on 4.
func TestCheckpointEvery(t *testing.T) {
	dir := t.TempDir()
	cfg := small() // 25 steps per epoch, 2 epochs
	cfg.Checkpoint = filepath.Join(dir, "ck.safetensors")
	cfg.CheckpointEvery = 7
	cfg.CheckpointKeep = 100
	var written []int64
	cfg.OnCheckpoint = func(c Checkpointed) {
		written = append(written, c.Info.GlobalStep)
		require.Equal(t, StampedCheckpoint(cfg.Checkpoint, c.Info.GlobalStep), c.Stamped)
	}
	want, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	require.Equal(t, []int64{7, 14, 21, 25, 28, 35, 42, 49, 50}, written)
	require.Equal(t, written, stampedSteps(t, cfg.Checkpoint))
	info, err := ReadCheckpointInfo(filepath.Join(dir, "ck.step14.safetensors"))
	require.NoError(t, err)
	require.Equal(t, 0, info.Epoch)
	require.Equal(t, 14, info.StepInEpoch)

	// On the same 2 ranks bitwise; on 4 within rounding (the same batches,
	// split differently).
	for _, ranks := range []int{2, 4} {
		next := cfg
		next.Ranks = ranks
		next.Resume = filepath.Join(dir, "ck.step14.safetensors")
		next.Checkpoint, next.CheckpointEvery, next.CheckpointKeep, next.OnCheckpoint = "", 0, 0, nil
		got, err := Run(ctxT(t), next)
		require.NoError(t, err)
		if ranks == cfg.Ranks {
			equalParams(t, want.Params, got.Params)
		} else {
			require.Less(t, maxParamDiff(want.Params, got.Params), 1e-5, "%d ranks", ranks)
		}
	}
}

// The series keeps the newest CheckpointKeep stamped checkpoints, and one
// written after going back to an older checkpoint removes those past it.
func TestCheckpointKeepPrunes(t *testing.T) {
	dir := t.TempDir()
	cfg := small()
	cfg.Epochs = 1
	cfg.Checkpoint = filepath.Join(dir, "ck.safetensors")
	cfg.CheckpointEvery = 5
	cfg.CheckpointKeep = 2
	_, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	require.Equal(t, []int64{20, 25}, stampedSteps(t, cfg.Checkpoint))
	a, err := os.Stat(cfg.Checkpoint)
	require.NoError(t, err)
	b, err := os.Stat(StampedCheckpoint(cfg.Checkpoint, 25))
	require.NoError(t, err)
	require.True(t, os.SameFile(a, b), "the plain name is the newest checkpoint")

	// Back to step 20 (as after a crash that tore step 25's): the next
	// checkpoint, at 25 again, replaces it; one at 22 would remove it.
	require.NoError(t, prune(cfg.Checkpoint, 22, 2))
	require.Equal(t, []int64{20}, stampedSteps(t, cfg.Checkpoint))
}

// NewestCheckpoint takes the valid checkpoint with the most steps and
// skips, naming them, the torn ones.
func TestNewestCheckpointSkipsTorn(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ck.safetensors")
	found, err := NewestCheckpoint(path, "")
	require.NoError(t, err)
	require.Empty(t, found.Path, "nothing written yet")
	require.Empty(t, found.Skipped)

	cfg := small()
	cfg.Epochs = 1
	cfg.Checkpoint = path
	cfg.CheckpointEvery = 10
	cfg.CheckpointKeep = 3
	_, err = Run(ctxT(t), cfg)
	require.NoError(t, err)
	found, err = NewestCheckpoint(path, "")
	require.NoError(t, err)
	require.Equal(t, StampedCheckpoint(path, 25), found.Path, "a stamped name before the plain one")
	require.Equal(t, int64(25), found.Info.GlobalStep)

	// Tear step 25's (both names: one file) and damage step 20's header.
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(path, st.Size()/2))
	b, err := os.ReadFile(StampedCheckpoint(path, 20))
	require.NoError(t, err)
	b[20] ^= 0xff
	require.NoError(t, os.WriteFile(StampedCheckpoint(path, 20), b, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ck.stepx.safetensors"), []byte("not ours"), 0o644))

	found, err = NewestCheckpoint(path, "")
	require.NoError(t, err)
	require.Equal(t, StampedCheckpoint(path, 10), found.Path)
	var skipped []string
	for _, s := range found.Skipped {
		require.ErrorIs(t, s.Err, ErrCheckpoint)
		skipped = append(skipped, filepath.Base(s.Path))
	}
	sort.Strings(skipped)
	require.Equal(t, []string{"ck.safetensors", "ck.step20.safetensors", "ck.step25.safetensors"}, skipped)
}
