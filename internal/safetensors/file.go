package safetensors

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// ReadFile reads and decodes the safetensors file at path; errors name it.
func ReadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// WriteFile writes tensors and metadata to path atomically (AtomicWriteFile).
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	return AtomicWriteFile(path, func(w io.Writer) error { return Write(w, tensors, metadata) })
}

// AtomicWriteFile replaces path with what write writes, atomically: it
// writes to a new temporary file in path's directory, flushes and fsyncs it,
// closes it, renames it over path and fsyncs the directory. On any error the
// temporary file is removed and path is untouched. The file gets mode 0644.
func AtomicWriteFile(path string, write func(w io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	name := tmp.Name()
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(name)
			err = fmt.Errorf("safetensors: writing %s: %w", path, err)
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = write(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(name, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so a rename in it is durable. Filesystems and
// platforms that cannot sync a directory (EINVAL, e.g. some network
// filesystems; Windows) are not an error.
func syncDir(dir string) error {
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
