package datasets

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ExportBundledMNIST copies the bundled MNIST (BundledMNISTDir) into dir,
// creating it if needed: the four gzipped IDX files under the names
// LoadMNIST looks for, so that LoadMNIST(ctx, dir) loads the same data on a
// machine without the go command or the module cache. Each file is written
// to a temporary name and renamed, so an interrupted export leaves no
// partial file under a real name. It returns the paths written.
func ExportBundledMNIST(ctx context.Context, dir string) ([]string, error) {
	src, err := BundledMNISTDir(ctx)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("datasets: exporting MNIST: %w", err)
	}
	var written []string
	for _, base := range mnistFiles {
		if err := ctx.Err(); err != nil {
			return written, err
		}
		name := base + ".gz"
		dst := filepath.Join(dir, name)
		if err := copyFileAtomic(filepath.Join(src, name), dst); err != nil {
			return written, fmt.Errorf("datasets: exporting MNIST to %s: %w", dir, err)
		}
		written = append(written, dst)
	}
	return written, nil
}

// copyFileAtomic copies src to dst (mode 0644) through a temporary file in
// dst's directory.
func copyFileAtomic(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, in); err != nil {
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
	return os.Rename(tmp.Name(), dst)
}
