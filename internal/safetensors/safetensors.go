// Package safetensors reads and writes the safetensors file format
// (https://github.com/huggingface/safetensors):
//
//	8 bytes    N, the header length, unsigned little-endian
//	N bytes    the header: a JSON object, padded at the end with spaces
//	           {"__metadata__": {"key": "value", ...},
//	            "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//	rest       the data section: every tensor's bytes, little-endian,
//	           row-major; data_offsets are relative to its start
//
// The writer is deterministic: tensors are laid out by element size
// (largest first, so every tensor starts aligned to its element size) and
// then by name, the metadata keys are sorted, and the header is padded with
// spaces to a multiple of 8 bytes. The same tensors and metadata always give
// the same bytes.
//
// The reader is strict and never panics or allocates in proportion to sizes
// the input merely declares: the header is bounded (Limits: its length,
// the number of tensors and metadata entries, name lengths, dimensions,
// each checked while the header is scanned, so a hostile header is refused
// at the first entry past a limit); the header must be one JSON object
// starting with '{' followed only by spaces, with no duplicate keys at any
// level and no unknown fields in a tensor entry; every dtype must be known, every
// dimension non-negative, the byte length (shape product × dtype size,
// computed with overflow checks) must equal end-begin, and the tensors must
// tile the data section exactly: sorted by offset they start at 0, are
// contiguous, do not overlap and end at its last byte.
//
// WriteFile writes atomically (internal/outfile: temporary file in the
// target directory, fsync, rename, fsync of the directory), so a crash
// leaves either the old file or the new one, never a torn one, and a
// symbolic link at the target is replaced, never followed.
package safetensors

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// MaxHeaderSize is the format's bound on the header length (100 MiB), as
// in the reference implementation: the most Limits.HeaderBytes may be.
const MaxHeaderSize = 100 << 20

// MetadataKey is the reserved header key of the string-to-string metadata.
const MetadataKey = "__metadata__"

// ErrFormat is wrapped by every error about malformed input.
var ErrFormat = errors.New("safetensors: invalid file")

// DType is a safetensors element type name.
type DType string

// The element types of the format.
const (
	BOOL    DType = "BOOL"
	U8      DType = "U8"
	I8      DType = "I8"
	F8E5M2  DType = "F8_E5M2"
	F8E4M3  DType = "F8_E4M3"
	I16     DType = "I16"
	U16     DType = "U16"
	F16     DType = "F16"
	BF16    DType = "BF16"
	I32     DType = "I32"
	U32     DType = "U32"
	F32     DType = "F32"
	F64     DType = "F64"
	I64     DType = "I64"
	U64     DType = "U64"
	invalid DType = ""
)

var dtypeSizes = map[DType]int{
	BOOL: 1, U8: 1, I8: 1, F8E5M2: 1, F8E4M3: 1,
	I16: 2, U16: 2, F16: 2, BF16: 2,
	I32: 4, U32: 4, F32: 4,
	F64: 8, I64: 8, U64: 8,
}

// Size returns the element size in bytes, or 0 for an unknown dtype.
func (d DType) Size() int { return dtypeSizes[d] }

// Valid reports whether d is a known dtype.
func (d DType) Valid() bool { return d.Size() > 0 }

// Tensor is one named tensor: its dtype, shape (empty for a scalar) and raw
// little-endian row-major bytes.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// NumElements returns the product of the shape (1 for a scalar), or an
// error if a dimension is negative or the product overflows.
func (t Tensor) NumElements() (int, error) { return numElements(t.Shape) }

func numElements(shape []int) (int, error) {
	n := uint64(1)
	for i, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("dimension %d is %d", i, d)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("shape %v: element count overflows", shape)
		}
		n = lo
	}
	return int(n), nil
}

// byteLen returns count × size with an overflow check.
func byteLen(count, size int) (int, error) {
	hi, lo := bits.Mul64(uint64(count), uint64(size))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("%d elements of %d bytes overflow", count, size)
	}
	return int(lo), nil
}

// check validates t for writing.
func (t Tensor) check() error {
	if t.Name == MetadataKey {
		return fmt.Errorf("safetensors: tensor name %q is reserved", t.Name)
	}
	if !t.DType.Valid() {
		return fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
	}
	n, err := t.NumElements()
	if err != nil {
		return fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
	}
	want, err := byteLen(n, t.DType.Size())
	if err != nil {
		return fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
	}
	if len(t.Data) != want {
		return fmt.Errorf("safetensors: tensor %q: %d bytes of data, want %d (%d × %s of %d bytes)",
			t.Name, len(t.Data), want, n, t.DType, t.DType.Size())
	}
	return nil
}

// File is a decoded safetensors file.
type File struct {
	// Metadata is the header's __metadata__ (nil if it had none).
	Metadata map[string]string
	// Tensors are in data-section order. Their Data share memory with
	// the input given to Parse (or the buffer Read made).
	Tensors []Tensor
	data    []byte
	offsets [][2]uint64 // while parsing, before bind
}

// Tensor returns the tensor called name.
func (f *File) Tensor(name string) (Tensor, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// Names returns the tensor names in data-section order.
func (f *File) Names() []string {
	out := make([]string, len(f.Tensors))
	for i, t := range f.Tensors {
		out[i] = t.Name
	}
	return out
}

// DataSection returns the raw data section (shared, not copied).
func (f *File) DataSection() []byte { return f.data }

// DataSHA256 returns the hex SHA-256 of the data section.
func (f *File) DataSHA256() string {
	sum := sha256.Sum256(f.data)
	return hex.EncodeToString(sum[:])
}
