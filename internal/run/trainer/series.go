package trainer

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ringddp/ringddp/internal/outfile"
)

// A checkpoint series is the file Config.Checkpoint names plus, with
// Config.CheckpointKeep > 0, the last checkpoints under step-stamped names
// beside it (ck.safetensors: ck.step120.safetensors, ...). Each is written
// atomically (temporary file, fsync, rename); the plain name is then
// pointed at the newest one (a hard link, renamed over it). A crash can
// still leave a torn file on a filesystem whose renames are not atomic, or
// a file can be damaged later: NewestCheckpoint verifies every candidate's
// checksums and takes the valid one with the most steps, skipping and
// naming the others.

// Checkpointed describes a checkpoint just written (Config.OnCheckpoint).
type Checkpointed struct {
	Path    string // Config.Checkpoint
	Stamped string // its step-stamped copy ("" without CheckpointKeep)
	Info    CheckpointInfo
}

// StampedCheckpoint is the name under which the checkpoint at global step
// step is kept beside path: ck.safetensors gives ck.step120.safetensors.
func StampedCheckpoint(path string, step int64) string {
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + ".step" + strconv.FormatInt(step, 10) + ext
}

// stampedFile is one step-stamped checkpoint found beside a path.
type stampedFile struct {
	path string
	step int64
}

// stampedFiles lists path's step-stamped checkpoints, by step.
func stampedFiles(path string) ([]stampedFile, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ext := filepath.Ext(base)
	prefix := strings.TrimSuffix(base, ext) + ".step"
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("trainer: listing the checkpoints beside %s: %w", path, err)
	}
	var out []stampedFile
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ext) {
			continue
		}
		digits := strings.TrimSuffix(strings.TrimPrefix(name, prefix), ext)
		step, err := strconv.ParseInt(digits, 10, 64)
		if err != nil || step < 0 || strconv.FormatInt(step, 10) != digits {
			continue
		}
		out = append(out, stampedFile{path: filepath.Join(dir, name), step: step})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].step < out[j].step })
	return out, nil
}

// SkippedCheckpoint is a candidate NewestCheckpoint did not take: unreadable,
// torn or otherwise invalid.
type SkippedCheckpoint struct {
	Path string
	Err  error
}

// FoundCheckpoint is NewestCheckpoint's answer.
type FoundCheckpoint struct {
	Path    string // "" when no candidate is valid
	Info    CheckpointInfo
	Skipped []SkippedCheckpoint // invalid candidates, newest (by name's step) first
}

// NewestCheckpoint looks at path and its step-stamped checkpoints
// (ListSeries) and returns the valid one (format, checksums, internal
// consistency: as -resume checks) of job with the most optimizer steps,
// preferring a stamped name to path on a tie (it is never rewritten);
// job "" takes any job's. Invalid files and other jobs' checkpoints are
// listed in Skipped (the latter wrapping ErrOtherJob). Found.Path is ""
// when none is taken. The error is for a directory that cannot be listed.
func NewestCheckpoint(path, job string) (FoundCheckpoint, error) {
	files, err := ListSeries(path)
	if err != nil {
		return FoundCheckpoint{}, err
	}
	return NewestOf(files, job), nil
}

// NewestOf is NewestCheckpoint's choice among files (ListSeries').
func NewestOf(files []SeriesFile, job string) FoundCheckpoint {
	var found FoundCheckpoint
	for _, f := range files {
		switch {
		case f.Err != nil:
			found.Skipped = append(found.Skipped, SkippedCheckpoint{Path: f.Path, Err: f.Err})
		case job != "" && f.Info.JobID != job:
			found.Skipped = append(found.Skipped, SkippedCheckpoint{Path: f.Path, Err: fmt.Errorf("%w %s at global step %d, not by this job (%s)",
				ErrOtherJob, jobName(f.Info.JobID), f.Info.GlobalStep, job)})
		case found.Path == "" || f.Info.GlobalStep > found.Info.GlobalStep:
			found.Path, found.Info = f.Path, f.Info
		}
	}
	return found
}

// saveCheckpoint writes the checkpoint at step with write: to path alone
// without keep, else to its stamped name, then path is pointed at that
// file and the series pruned to the keep newest (prune).
func saveCheckpoint(path string, keep int, step int64, write func(string) error) (stamped string, err error) {
	if keep <= 0 {
		return "", write(path)
	}
	stamped = StampedCheckpoint(path, step)
	if err := write(stamped); err != nil {
		return "", err
	}
	if err := linkOver(stamped, path); err != nil {
		// No hard links here (some network and FAT filesystems): a copy.
		if err := write(path); err != nil {
			return "", err
		}
	}
	return stamped, prune(path, step, keep)
}

// linkOver atomically replaces dst with a hard link to src.
func linkOver(src, dst string) error {
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	dir, base := filepath.Split(dst)
	tmp := filepath.Join(dir, "."+base+".link-"+hex.EncodeToString(r[:]))
	if err := os.Link(src, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return outfile.SyncDir(dir)
}

// prune removes path's stamped checkpoints past step (left by a timeline
// that was abandoned when training went back to an older checkpoint) and
// all but the keep newest of the others.
func prune(path string, step int64, keep int) error {
	files, err := stampedFiles(path)
	if err != nil {
		return err
	}
	var kept int
	for i := len(files) - 1; i >= 0; i-- {
		f := files[i]
		if f.step <= step && kept < keep {
			kept++
			continue
		}
		if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("trainer: pruning old checkpoints: %w", err)
		}
	}
	return nil
}
