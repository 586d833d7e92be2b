package trainer

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/internal/safetensors"
)

// A compressed run stopped mid-epoch and resumed from its checkpoint ends
// with bitwise the parameters of the run that never stopped: the
// checkpoint carries the hook's residuals, PowerSGD's Qs, step count and
// generator. Without the hook section (stripped from the file) the
// resumed run differs: the test can tell. (About 0.3 s per case; skipped
// under -race, where the four take 20 s: ddp's TestHookStateResumesBitwise
// covers the state itself there.)
func TestResumeCompressedBitwise(t *testing.T) {
	if underRace {
		t.Skip("whole training runs: too slow under the race detector")
	}
	for _, c := range []string{"fp16", "bf16", "powersgd:2:5", "auto"} {
		t.Run(c, func(t *testing.T) {
			dir := t.TempDir()
			cfg := small()
			cfg.Epochs = 1
			cfg.Compress = c
			want, err := Run(ctxT(t), cfg)
			require.NoError(t, err)

			first := cfg
			first.MaxSteps = 13
			first.Checkpoint = filepath.Join(dir, "part.safetensors")
			_, err = Run(ctxT(t), first)
			require.NoError(t, err)
			f, err := safetensors.ReadFile(first.Checkpoint)
			require.NoError(t, err)
			require.Contains(t, f.Metadata, "hook.kind")
			if _, ok := f.Tensor(hookLocalPrefix + "1"); !ok && c != "auto" {
				t.Fatal("rank 1's residuals are not in the file")
			}

			second := cfg
			second.Resume = first.Checkpoint
			got, err := Run(ctxT(t), second)
			require.NoError(t, err)
			equalParams(t, want.Params, got.Params)
			if c == "auto" {
				return // auto leaves this link's buckets uncompressed: nothing to lose
			}

			stripped := filepath.Join(dir, "stripped.safetensors")
			stripHookSection(t, first.Checkpoint, stripped)
			third := cfg
			third.Resume = stripped
			fresh, err := Run(ctxT(t), third)
			require.NoError(t, err)
			require.NotEqual(t, want.Params[0].Data, fresh.Params[0].Data, "resumed without the hook state")
		})
	}
}

// On another world size the residuals are redistributed with their sum
// kept (ddp's TestResidualsRedistributedAcrossWorldSizes shows that this
// keeps the next step's averaged input): resumed 4 → 3 and 2 → 4 and
// stopped before a step, the resumed run's checkpoint holds on every rank
// Σ_r e_r / N' (16-bit compression) or Σ_r e_r / N (PowerSGD) of the
// saved residuals e_r, within one float32 rounding of the sum, the same
// Qs bitwise, and the run then trains on to the end.
func TestResumeCompressedOtherWorldSize(t *testing.T) {
	if underRace {
		t.Skip("whole training runs: too slow under the race detector")
	}
	for _, c := range []struct {
		compress string
		from, to int
	}{{"bf16", 4, 3}, {"powersgd:2:0", 2, 4}} {
		t.Run(fmt.Sprintf("%s/%d-to-%d", c.compress, c.from, c.to), func(t *testing.T) {
			dir := t.TempDir()
			cfg := small()
			cfg.Epochs, cfg.Compress, cfg.Ranks = 1, c.compress, c.from
			cfg.MaxSteps = 7
			cfg.Checkpoint = filepath.Join(dir, "a.safetensors")
			_, err := Run(ctxT(t), cfg)
			require.NoError(t, err)
			saved, err := readCheckpoint(cfg.Checkpoint)
			require.NoError(t, err)
			require.Len(t, saved.hook.local, c.from)

			next := cfg
			next.Ranks, next.Resume, next.Checkpoint = c.to, cfg.Checkpoint, filepath.Join(dir, "b.safetensors")
			_, err = Run(ctxT(t), next)
			require.NoError(t, err)
			loaded, err := readCheckpoint(next.Checkpoint)
			require.NoError(t, err)
			require.Len(t, loaded.hook.local, c.to)
			require.Equal(t, saved.hook.shared, loaded.hook.shared)
			div := float64(c.to)
			if c.compress != "bf16" {
				div = float64(c.from)
			}
			biggest := 0.0
			for k := range saved.hook.local[0] {
				sum, mag := 0.0, 0.0
				for _, l := range saved.hook.local {
					sum += l[k]
					mag += math.Abs(l[k])
				}
				for r, l := range loaded.hook.local {
					require.InDelta(t, sum/div, l[k], 0x1p-23*mag/div, "rank %d residual %d", r, k)
				}
				biggest = max(biggest, math.Abs(sum))
			}
			require.NotZero(t, biggest, "no residuals to carry over: the test cannot tell")

			next.MaxSteps, next.Resume = 0, next.Checkpoint
			res, err := Run(ctxT(t), next)
			require.NoError(t, err)
			require.Equal(t, StopDone, res.Stop)
		})
	}
}

// stripHookSection writes src without its hook tensors and metadata, as
// a build before the section would have written it.
func stripHookSection(t *testing.T, src, dst string) {
	t.Helper()
	ck, err := readCheckpoint(src)
	require.NoError(t, err)
	ck.hook = nil
	f, err := safetensors.ReadFile(src)
	require.NoError(t, err)
	var tensors []safetensors.Tensor
	for _, x := range f.Tensors {
		if len(x.Name) < len(hookPrefix) || x.Name[:len(hookPrefix)] != hookPrefix {
			tensors = append(tensors, x)
		}
	}
	meta := map[string]string{}
	for k, v := range f.Metadata {
		if len(k) < 5 || k[:5] != "hook." {
			meta[k] = v
		}
	}
	meta[keyDataSHA] = safetensors.DataSHA256(tensors)
	meta[keyIndexSHA] = indexSHA256(meta, tensors)
	require.NoError(t, safetensors.WriteFile(dst, 0o600, tensors, meta))
}

// A hook section that lies about itself is refused naming what is wrong,
// without allocating what it claims.
func TestHostileHookSection(t *testing.T) {
	if underRace {
		t.Skip("whole training runs: too slow under the race detector")
	}
	dir := t.TempDir()
	cfg := small()
	cfg.Epochs, cfg.Compress, cfg.MaxSteps = 1, "bf16", 3
	cfg.Checkpoint = filepath.Join(dir, "a.safetensors")
	_, err := Run(ctxT(t), cfg)
	require.NoError(t, err)
	for key, tc := range map[string]struct{ value, want string }{
		"hook.version":   {"9", `hook.version = "9"`},
		"hook.ranks":     {"1000000000", "hook section of 1000000000 ranks"},
		"hook.local_len": {"7", "want F32[7]"},
		"hook.kind":      {"powersgd/1", "the communication hook's state"},
	} {
		path := filepath.Join(dir, "bad.safetensors")
		rewriteMeta(t, cfg.Checkpoint, path, key, tc.value)
		next := cfg
		next.MaxSteps, next.Resume, next.Checkpoint = 0, path, ""
		_, err := Run(ctxT(t), next)
		require.ErrorContains(t, err, tc.want, key)
	}
}

// rewriteMeta writes src with metadata key set to value, checksums redone.
func rewriteMeta(t *testing.T, src, dst, key, value string) {
	t.Helper()
	f, err := safetensors.ReadFile(src)
	require.NoError(t, err)
	meta := map[string]string{}
	for k, v := range f.Metadata {
		meta[k] = v
	}
	meta[key] = value
	meta[keyIndexSHA] = indexSHA256(meta, f.Tensors)
	require.NoError(t, safetensors.WriteFile(dst, 0o600, f.Tensors, meta))
}
