package trainer

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/safetensors"
)

// restamp rewrites the checkpoint at src into dst as if job had written it
// at global step step (its checksums recomputed): another job's file.
func restamp(t *testing.T, src, dst, job string, step int64) {
	t.Helper()
	f, err := safetensors.ReadFile(src)
	require.NoError(t, err)
	meta := f.Metadata
	meta[keyJobID] = job
	if job == "" {
		delete(meta, keyJobID)
	}
	meta["global_step"] = strconv.FormatInt(step, 10)
	meta[keyIndexSHA] = indexSHA256(meta, f.Tensors)
	require.NoError(t, safetensors.WriteFile(dst, 0o600, f.Tensors, meta))
}

// A checkpoint records its job id and mode, and is private to its owner.
func TestCheckpointRecordsJobAndMode(t *testing.T) {
	dir := t.TempDir()
	cfg := small()
	cfg.Epochs = 1
	cfg.MaxSteps = 5
	cfg.Zero1 = true
	cfg.JobID = "job-test"
	cfg.Checkpoint = filepath.Join(dir, "ck.safetensors")
	_, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	info, err := ReadCheckpointInfo(cfg.Checkpoint)
	require.NoError(t, err)
	require.Equal(t, "job-test", info.JobID)
	require.True(t, info.Zero1)
	st, err := os.Stat(cfg.Checkpoint)
	require.NoError(t, err)
	require.Zero(t, st.Mode().Perm()&0o077, "mode %v", st.Mode().Perm())

	cfg.JobID = "has space"
	require.ErrorContains(t, cfg.Validate(), "job id")
}

// The story, in the trainer's terms: a run leaves ck.safetensors
// at step 300 (job A); a new job B writes its own checkpoints into the
// same series (ck.step5, ck.step10); choosing where B restarts takes B's
// step 10 and names A's file as skipped, never "resumes from step 300";
// and B, starting afresh, is refused the series while A's file is there.
func TestRestartTakesOnlyOwnJob(t *testing.T) {
	dir := t.TempDir()
	cfg := small()
	cfg.Epochs = 1
	cfg.MaxSteps = 10
	cfg.CheckpointEvery, cfg.CheckpointKeep = 5, 10
	cfg.JobID = "job-B"
	cfg.Checkpoint = filepath.Join(dir, "ck.safetensors")
	_, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	restamp(t, StampedCheckpoint(cfg.Checkpoint, 10), cfg.Checkpoint, "job-A", 300)

	found, err := NewestCheckpoint(cfg.Checkpoint, "job-B")
	require.NoError(t, err)
	require.Equal(t, StampedCheckpoint(cfg.Checkpoint, 10), found.Path)
	require.Equal(t, int64(10), found.Info.GlobalStep)
	require.Len(t, found.Skipped, 1)
	require.Equal(t, cfg.Checkpoint, found.Skipped[0].Path)
	require.ErrorIs(t, found.Skipped[0].Err, ErrOtherJob)
	require.ErrorContains(t, found.Skipped[0].Err, "job-A at global step 300")

	// Without a job, the newest of any (the old behaviour) is A's.
	found, err = NewestCheckpoint(cfg.Checkpoint, "")
	require.NoError(t, err)
	require.Equal(t, int64(300), found.Info.GlobalStep)

	// B may not write into the series (resuming its own step 10) while A's
	// file is in it.
	err = CheckSeries(cfg.Checkpoint, SeriesRule{Jobs: []string{"job-B"}})
	var c *SeriesConflict
	require.ErrorAs(t, err, &c)
	require.ErrorIs(t, err, ErrOtherJob)
	require.Equal(t, cfg.Checkpoint, c.Path)
	require.EqualError(t, err, cfg.Checkpoint+" holds a checkpoint written by another job: job job-A, global step 300, epoch 1 (this run is job job-B)")
	ids, desc := SeriesJobs(mustList(t, cfg.Checkpoint))
	require.Equal(t, []string{"job-B", "job-A"}, ids)
	require.Equal(t, []string{"job-B (newest step 10)", "job-A (newest step 300)"}, desc)
}

func mustList(t *testing.T, path string) []SeriesFile {
	files, err := ListSeries(path)
	require.NoError(t, err)
	return files
}

// CheckSeries: what a fresh run, a resuming one and an elastic restart may
// replace.
func TestCheckSeriesRules(t *testing.T) {
	dir := t.TempDir()
	cfg := small()
	cfg.Epochs = 1
	cfg.MaxSteps = 5
	cfg.JobID = "job-A"
	cfg.Checkpoint = filepath.Join(dir, "src.safetensors")
	_, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	src := cfg.Checkpoint

	series := func(t *testing.T, files map[string]string) string {
		d := t.TempDir()
		path := filepath.Join(d, "ck.safetensors")
		for name, job := range files {
			p := filepath.Join(d, name)
			switch job {
			case "torn":
				b, err := os.ReadFile(src)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(p, b[:len(b)/2], 0o600))
			default:
				restamp(t, src, p, job, 5)
			}
		}
		return path
	}
	fresh := SeriesRule{Jobs: []string{"job-A"}, Fresh: true}
	restart := SeriesRule{Jobs: []string{"job-A"}, Fresh: true, Restart: true}
	resume := SeriesRule{Jobs: []string{"job-A"}}
	adopt := SeriesRule{Jobs: []string{"job-B", "job-A"}}
	for _, tc := range []struct {
		name  string
		files map[string]string
		rule  SeriesRule
		want  string // "" no conflict
	}{
		{"fresh, empty", nil, fresh, ""},
		{"fresh, own", map[string]string{"ck.safetensors": "job-A"}, fresh, "holds a checkpoint of this job (job-A) at global step 5, epoch 1, but this run starts from the beginning"},
		{"fresh, other", map[string]string{"ck.step5.safetensors": "job-B"}, fresh, "written by another job: job job-B"},
		{"fresh, older build", map[string]string{"ck.safetensors": ""}, fresh, "job (none: written before job ids)"},
		{"fresh, torn", map[string]string{"ck.safetensors": "torn"}, fresh, "exists but is not a valid checkpoint"},
		{"restart, torn", map[string]string{"ck.safetensors": "torn"}, restart, ""},
		{"resume, own and torn", map[string]string{"ck.safetensors": "job-A", "ck.step5.safetensors": "torn"}, resume, ""},
		{"resume, other", map[string]string{"ck.safetensors": "job-A", "ck.step7.safetensors": "job-C"}, resume, "job job-C"},
		{"adopting A as B", map[string]string{"ck.safetensors": "job-A"}, adopt, ""},
		{"unrelated file", map[string]string{"ck.stepx.safetensors": "torn"}, fresh, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSeries(series(t, tc.files), tc.rule)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A hostile checkpoint, its header the format's largest (100 MiB) or a
// flood of tensors within the checkpoint limit's bytes, is refused quickly
// with an error naming the limit.
func TestHostileCheckpointHeader(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.safetensors")
	b := binary.LittleEndian.AppendUint64(nil, safetensors.MaxHeaderSize)
	require.NoError(t, os.WriteFile(huge, append(b, '{'), 0o600))
	require.NoError(t, os.Truncate(huge, 8+safetensors.MaxHeaderSize))
	start := time.Now()
	_, err := ReadCheckpointInfo(huge)
	require.ErrorIs(t, err, ErrCheckpoint)
	require.ErrorContains(t, err, "exceeds the limit of 1048576 bytes")
	require.Less(t, time.Since(start), 2*time.Second)

	many := filepath.Join(dir, "many.safetensors")
	h := []byte{'{'}
	for i := 0; len(h) < 1<<20-100; i++ {
		if i > 0 {
			h = append(h, ',')
		}
		h = append(h, `"t`+strconv.Itoa(i)+`":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}`...)
	}
	h = append(h, '}')
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	require.NoError(t, os.WriteFile(many, append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), h...), 0o600))
	start = time.Now()
	_, err = ReadCheckpointInfo(many)
	require.ErrorContains(t, err, "more than 4096 tensors (the limit)")
	t.Logf("refused in %v", time.Since(start))
	require.Less(t, time.Since(start), 2*time.Second)
}
