// Package outfile creates the files a run writes (checkpoints, traces,
// metrics, plots, CPU profiles) without following symbolic links and with
// the permissions a PyTorch user expects.
//
// Vocabulary: the target is the path the user named; the temporary file is
// a new file beside it, in the same directory, named
// ".<target base>.tmp-<16 random hex digits>".
//
// Create and Write take these steps:
//
//  1. open the temporary file with O_CREATE|O_EXCL: a name that exists,
//     a symbolic link included, is never opened, so nothing the open
//     touches can be a link another user planted; the mode given is
//     reduced by the process's umask, as open(2) (and so torch.save) does;
//  2. write to it;
//  3. on Commit: flush, fsync and close it, rename it over the target and
//     fsync the directory. rename(2) replaces the directory entry: a
//     symbolic link at the target is replaced by the new file, never
//     followed, so the file the link pointed to is left untouched; a
//     directory at the target is an error;
//  4. on any error, or Abort, remove the temporary file: the target is
//     then as it was.
//
// A reader therefore sees the old file or the new one, never a torn one.
// Only the last component is protected: a directory on the path that
// another user can replace (a link in a shared /tmp) is the caller's to
// avoid, as with any program.
package outfile

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Modes of the outputs, before the umask. Checkpoints hold the trained
// model and optimizer state and are private to their owner (0600), as
// ssh keys are; reports meant to be shared (traces, metrics, plots, CPU
// profiles) are 0644, what torch.save and Python's open give under the
// usual umask 022.
const (
	Private os.FileMode = 0o600
	Shared  os.FileMode = 0o644
)

// File is an output being written: an *os.File on the temporary file
// until Commit renames it over the target.
type File struct {
	*os.File
	target string
	done   bool
}

// Create starts replacing path with a new file of mode (less the umask).
// Write to the File, then Commit, or Abort to leave path as it was.
func Create(path string, mode os.FileMode) (*File, error) {
	dir, base := filepath.Split(path)
	if base == "" {
		return nil, fmt.Errorf("%s: not a file name", path)
	}
	if dir == "" {
		dir = "."
	}
	for range 3 { // a name clash with 64 random bits is astronomically rare
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
		tmp := filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(r[:]))
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
		return &File{File: f, target: path}, nil
	}
	return nil, fmt.Errorf("writing %s: no free temporary name in %s", path, dir)
}

// Commit fsyncs and closes the temporary file, renames it over the target
// (replacing a symbolic link there, not following it) and fsyncs the
// directory. On error the temporary file is removed.
func (f *File) Commit() (err error) {
	if f.done {
		return fmt.Errorf("writing %s: already committed or aborted", f.target)
	}
	f.done = true
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.File.Close()
			_ = os.Remove(tmp)
			err = fmt.Errorf("writing %s: %w", f.target, err)
		}
	}()
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.File.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, f.target); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(f.target))
}

// Abort closes and removes the temporary file; the target is untouched.
// After Commit it does nothing, so `defer f.Abort()` is safe.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	_ = f.File.Close()
	_ = os.Remove(f.Name())
}

// Write replaces path with what write writes, through a buffer, as Create
// and Commit do; on error path is untouched.
func Write(path string, mode os.FileMode, write func(w io.Writer) error) error {
	f, err := Create(path, mode)
	if err != nil {
		return err
	}
	defer f.Abort()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Commit()
}

// SyncDir fsyncs a directory so a rename in it is durable. Filesystems and
// platforms that cannot sync a directory (EINVAL, e.g. some network
// filesystems; Windows) are not an error.
func SyncDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// CheckWritable reports whether files can be created in dir, by creating
// and removing a temporary file there, so that an unwritable output
// directory is found before a run starts rather than at its first write.
// The error names dir.
func CheckWritable(dir string) error {
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, ".ringddp-write-test-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("directory %s: removing the test file %s: %w", dir, name, err)
	}
	return nil
}
