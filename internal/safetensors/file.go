package safetensors

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"github.com/ringddp/ringddp/internal/outfile"
)

// ReadFile reads and decodes the safetensors file at path within
// DefaultLimits; errors name it.
func ReadFile(path string) (*File, error) { return ReadFileLimits(path, DefaultLimits()) }

// ReadFileLimits is ReadFile within lim. It reads the header first and
// the data section only if its length is the one the header's tensors
// need: a hostile file costs at most lim.HeaderBytes of reading.
func ReadFileLimits(path string, lim Limits) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	f, err := readSized(bufio.NewReaderSize(fh, 64<<10), st.Size(), lim)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// WriteFile writes tensors and metadata to path atomically, with mode
// (less the umask), without following a symbolic link at path
// (outfile.Write).
func WriteFile(path string, mode os.FileMode, tensors []Tensor, metadata map[string]string) error {
	if err := outfile.Write(path, mode, func(w io.Writer) error { return Write(w, tensors, metadata) }); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// AtomicWriteFile replaces path with what write writes, atomically and
// without following a symbolic link at path, with mode 0644 less the umask
// (outfile.Write with outfile.Shared). On any error path is untouched.
func AtomicWriteFile(path string, write func(w io.Writer) error) error {
	if err := outfile.Write(path, outfile.Shared, write); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}
