package trainer

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/ringddp/ringddp/internal/safetensors"
)

// Job identity. A job is one training run as its user sees it: started
// once, then possibly stopped and resumed, or restarted by an elastic
// launcher after failures. Its job id (Config.JobID) is written into every
// checkpoint it writes (metadata job_id), so that a restart, `-resume
// latest` or an elastic launcher choosing where to resume takes only the
// job's own checkpoints, and a run never silently continues, or
// overwrites, another job's series (CheckSeries). The id is chosen by the
// command: given, taken from the launcher's environment, adopted from the
// checkpoint a run resumes, or new (NewJobID).

// MaxJobID is the longest job id, in bytes.
const MaxJobID = 128

// ErrOtherJob is wrapped by the errors about a checkpoint of another job.
var ErrOtherJob = errors.New("written by another job")

// CheckJobID checks a job id: at most MaxJobID bytes, each printable
// ASCII other than space ("" is valid: no id).
func CheckJobID(id string) error {
	if len(id) > MaxJobID {
		return fmt.Errorf("%d bytes, at most %d", len(id), MaxJobID)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("byte %d is %q: want printable ASCII without spaces", i, c)
		}
	}
	return nil
}

// NewJobID returns a new random job id, "job-" and 16 hex digits.
func NewJobID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("trainer: making a job id: %w", err)
	}
	return "job-" + hex.EncodeToString(b[:]), nil
}

// checkpointLimits bound the safetensors headers a checkpoint reader
// accepts: a checkpoint has two tensors per layer and at most a few
// optimizer buffers, a short name each and at most 4 dimensions, and
// about 30 metadata entries; 1 MiB holds the header of an MLP of over a
// thousand layers. A hostile file is refused after reading at most
// 1 MiB (docs/checkpoints.md gives the time). The writer checks them too.
func checkpointLimits() safetensors.Limits {
	return safetensors.Limits{HeaderBytes: 1 << 20, Tensors: 4096, NameBytes: 256, Dims: 8, MetadataEntries: 64}
}

// SeriesFile is one file of a checkpoint series (series.go): valid, with
// what it records, or not (Err).
type SeriesFile struct {
	Path string
	Info CheckpointInfo
	Err  error
}

// ListSeries reads path and its step-stamped checkpoints, newest stamp
// first and path last (left out when it does not exist), validating each
// as -resume does. The error is for a directory that cannot be listed.
func ListSeries(path string) ([]SeriesFile, error) {
	files, err := stampedFiles(path)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(files)+1)
	for i := len(files) - 1; i >= 0; i-- {
		names = append(names, files[i].path)
	}
	names = append(names, path)
	var out []SeriesFile
	for _, p := range names {
		info, err := ReadCheckpointInfo(p)
		if p == path && errors.Is(err, os.ErrNotExist) {
			continue
		}
		out = append(out, SeriesFile{Path: p, Info: info, Err: err})
	}
	return out, nil
}

// SeriesRule says which files of a checkpoint series a run about to write
// into it may replace.
type SeriesRule struct {
	// Jobs are the job ids whose checkpoints the run continues: its own,
	// and the one of the checkpoint it resumes ("" for a file of an older
	// build).
	Jobs []string
	// Fresh: the run starts from the beginning, so no checkpoint may be
	// in the series, its own job's included: it would be overwritten, or
	// the series would mix two timelines.
	Fresh bool
	// Restart: the run is an elastic restart of its job. Files that are
	// not valid checkpoints are taken to be the job's own, torn by the
	// failure, and are replaced, as in a run that resumes; in a fresh run
	// that is not a restart one is a conflict (it may be anything: the run
	// will not overwrite it unasked).
	Restart bool
}

// SeriesConflict is a file of the series a run may not write over.
type SeriesConflict struct {
	SeriesFile
	Job string // the run's job id
	Own bool   // a valid checkpoint of the run's job (in a fresh run)
}

func (c *SeriesConflict) Error() string {
	switch {
	case c.Err != nil:
		return fmt.Sprintf("%s exists but is not a valid checkpoint (%v)", c.Path, c.Err)
	case c.Own:
		return fmt.Sprintf("%s holds a checkpoint of this job (%s) at global step %d, epoch %d, but this run starts from the beginning",
			c.Path, c.Job, c.Info.GlobalStep, c.Info.Epoch+1)
	}
	return fmt.Sprintf("%s holds a checkpoint %s: job %s, global step %d, epoch %d (this run is job %s)",
		c.Path, ErrOtherJob, jobName(c.Info.JobID), c.Info.GlobalStep, c.Info.Epoch+1, c.Job)
}

func (c *SeriesConflict) Unwrap() error {
	if c.Err == nil && !c.Own {
		return ErrOtherJob
	}
	return nil
}

// jobName names a job id in messages, "(none)" for a file of an older build.
func jobName(id string) string {
	if id == "" {
		return "(none: written before job ids)"
	}
	return id
}

// CheckSeries checks, before a run writes checkpoints into path's series,
// that every file there is one the run may replace under rule: a valid
// checkpoint only of one of rule.Jobs and only in a run that resumes; a
// file that is not a valid checkpoint (torn, or anything else) only in a
// run that resumes or restarts. It returns the first conflict, newest
// stamp first, as a *SeriesConflict.
func CheckSeries(path string, rule SeriesRule) error {
	files, err := ListSeries(path)
	if err != nil {
		return err
	}
	own := rule.Jobs
	job := ""
	if len(own) > 0 {
		job = own[0]
	}
	for _, f := range files {
		switch {
		case f.Err != nil && rule.Fresh && !rule.Restart:
			return &SeriesConflict{SeriesFile: f, Job: job}
		case f.Err != nil:
		case !slices.Contains(own, f.Info.JobID):
			return &SeriesConflict{SeriesFile: f, Job: job}
		case rule.Fresh:
			return &SeriesConflict{SeriesFile: f, Job: job, Own: true}
		}
	}
	return nil
}

// SeriesJobs are the distinct job ids of the valid checkpoints among
// files, in their order, described as "ID (newest step N)".
func SeriesJobs(files []SeriesFile) (ids, described []string) {
	for _, f := range files {
		if f.Err != nil || slices.Contains(ids, f.Info.JobID) {
			continue
		}
		ids = append(ids, f.Info.JobID)
		best := f.Info.GlobalStep
		for _, g := range files {
			if g.Err == nil && g.Info.JobID == f.Info.JobID {
				best = max(best, g.Info.GlobalStep)
			}
		}
		described = append(described, fmt.Sprintf("%s (newest step %d)", jobName(f.Info.JobID), best))
	}
	return ids, described
}
