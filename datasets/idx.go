package datasets

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// The IDX format (http://yann.lecun.com/exdb/mnist/) is a 4-byte magic
// number — two zero bytes, a data type code and the number of dimensions —
// then one big-endian uint32 per dimension, then the elements in row-major
// order. Only the unsigned byte type (code 0x08), the one every MNIST-style
// dataset uses, is supported; the others are rejected with an error that
// names the type code.

// IDXTypeUint8 is the IDX data type code of unsigned bytes, the only one
// ReadIDX accepts.
const IDXTypeUint8 = 0x08

// DefaultMaxIDXBytes caps the payload a file may declare (the product of its
// dimensions times the element size) when read with ReadIDX or ReadIDXFile:
// 2 GiB, about 40 times the MNIST training images.
const DefaultMaxIDXBytes int64 = 1 << 31

// idxReadChunk is the first buffer size for the payload; the buffer then
// doubles as data actually arrives, so a short file that declares a huge
// payload fails on truncation having allocated little.
const idxReadChunk = 1 << 16

// Errors returned (wrapped, with details) by the IDX reader; test with errors.Is.
var (
	ErrIDXHeader    = errors.New("bad IDX header")
	ErrIDXType      = errors.New("unsupported IDX data type")
	ErrIDXTruncated = errors.New("truncated IDX file")
	ErrIDXTrailing  = errors.New("trailing bytes after IDX data")
	ErrIDXTooLarge  = errors.New("IDX declared size too large")
	ErrIDXCorrupt   = errors.New("corrupt compressed IDX file")
)

// IDX is a decoded IDX file of unsigned bytes.
type IDX struct {
	// Dims are the dimension sizes, outermost first (e.g. [60000 28 28]).
	Dims []int
	// Data holds the product of Dims elements in row-major order.
	Data []byte
}

// NumElements returns the product of x.Dims.
func (x *IDX) NumElements() int {
	n := 1
	for _, d := range x.Dims {
		n *= d
	}
	return n
}

// ReadIDX decodes one IDX file from r, which may be gzip-compressed (detected
// by the gzip magic 0x1f 0x8b). The whole input must be consumed by the file:
// trailing bytes are an error. The declared payload is capped at
// DefaultMaxIDXBytes.
func ReadIDX(r io.Reader) (*IDX, error) {
	x, err := readIDX(r, DefaultMaxIDXBytes)
	if err != nil {
		return nil, fmt.Errorf("datasets: %w", err)
	}
	return x, nil
}

// ReadIDXLimit is ReadIDX with a cap of maxBytes on the declared payload;
// maxBytes <= 0 means DefaultMaxIDXBytes.
func ReadIDXLimit(r io.Reader, maxBytes int64) (*IDX, error) {
	x, err := readIDX(r, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("datasets: %w", err)
	}
	return x, nil
}

// ReadIDXFile reads the IDX file at path (gzipped or not); errors name path.
func ReadIDXFile(path string) (*IDX, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("datasets: %w", err)
	}
	defer f.Close()
	x, err := readIDX(f, DefaultMaxIDXBytes)
	if err != nil {
		return nil, fmt.Errorf("datasets: %s: %w", path, err)
	}
	return x, nil
}

// WriteIDX writes dims and data as an uncompressed unsigned-byte IDX file.
// Wrap w in a gzip.Writer for a .gz file.
func WriteIDX(w io.Writer, dims []int, data []byte) error {
	if len(dims) == 0 || len(dims) > 255 {
		return fmt.Errorf("datasets: WriteIDX: %d dimensions, want 1..255", len(dims))
	}
	hdr := make([]byte, 4+4*len(dims))
	hdr[2], hdr[3] = IDXTypeUint8, byte(len(dims))
	n := uint64(1)
	for i, d := range dims {
		if d < 0 || uint64(d) > math.MaxUint32 {
			return fmt.Errorf("datasets: WriteIDX: dimension %d is %d, want 0..%d", i, d, uint32(math.MaxUint32))
		}
		binary.BigEndian.PutUint32(hdr[4+4*i:], uint32(d))
		n *= uint64(d)
	}
	if n != uint64(len(data)) {
		return fmt.Errorf("datasets: WriteIDX: dimensions %v hold %d elements, data has %d", dims, n, len(data))
	}
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("datasets: WriteIDX: %w", err)
	}
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("datasets: WriteIDX: %w", err)
	}
	return nil
}

// idxTypeName names the IDX data type codes for error messages.
func idxTypeName(code byte) string {
	switch code {
	case 0x08:
		return "unsigned byte"
	case 0x09:
		return "signed byte"
	case 0x0B:
		return "int16"
	case 0x0C:
		return "int32"
	case 0x0D:
		return "float32"
	case 0x0E:
		return "float64"
	}
	return "unknown"
}

// readIDX does the work of ReadIDX; its errors carry no package prefix.
func readIDX(r io.Reader, maxBytes int64) (*IDX, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxIDXBytes
	}
	if maxBytes > math.MaxInt {
		maxBytes = math.MaxInt
	}

	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReader(r)
	}
	var src io.Reader = br
	gz := false
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, classify(err, true, "gzip header")
		}
		defer zr.Close()
		src, gz = zr, true
	}

	// Magic: 0x00 0x00 type ndims.
	var magic [4]byte
	if n, err := io.ReadFull(src, magic[:]); err != nil {
		if n == 0 && err == io.EOF {
			return nil, fmt.Errorf("%w: empty input, no magic number", ErrIDXTruncated)
		}
		return nil, classify(err, gz, fmt.Sprintf("magic number (got %d of 4 bytes)", n))
	}
	if magic[0] != 0 || magic[1] != 0 {
		return nil, fmt.Errorf("%w: magic number %02x %02x %02x %02x does not start with 00 00 (not an IDX file?)",
			ErrIDXHeader, magic[0], magic[1], magic[2], magic[3])
	}
	if magic[2] != IDXTypeUint8 {
		return nil, fmt.Errorf("%w: type code 0x%02X (%s); only 0x%02X (unsigned byte) is supported",
			ErrIDXType, magic[2], idxTypeName(magic[2]), IDXTypeUint8)
	}
	ndims := int(magic[3])
	if ndims == 0 {
		return nil, fmt.Errorf("%w: zero dimensions declared", ErrIDXHeader)
	}

	// Dimensions: ndims big-endian uint32 (at most 1020 bytes).
	var dimBuf [255 * 4]byte
	if n, err := io.ReadFull(src, dimBuf[:4*ndims]); err != nil {
		return nil, classify(err, gz, fmt.Sprintf("dimensions (got %d of %d header bytes for %d dimensions)", n, 4*ndims, ndims))
	}
	dims := make([]int, ndims)
	size := uint64(1) // product of the non-zero dimensions, kept <= maxBytes
	empty := false
	for i := range dims {
		d := binary.BigEndian.Uint32(dimBuf[4*i:])
		if d == 0 {
			empty = true
			continue
		}
		if uint64(d) > uint64(maxBytes)/size {
			all, approx := make([]uint32, ndims), 1.0
			for j := range all {
				all[j] = binary.BigEndian.Uint32(dimBuf[4*j:])
				approx *= float64(max(all[j], 1))
			}
			return nil, fmt.Errorf("%w: dimensions %v declare about %.3g bytes, over the %d-byte limit",
				ErrIDXTooLarge, all, approx, maxBytes)
		}
		size *= uint64(d)
		dims[i] = int(d)
	}
	if empty {
		size = 0
	}

	data, err := readPayload(src, int(size))
	if err != nil {
		return nil, classify(err, gz, fmt.Sprintf("data (got %d of %d bytes for dimensions %v)", len(data), size, dims))
	}

	// The input must end here. Reading one more byte also makes the gzip
	// reader check the stream's CRC-32 and length.
	var one [1]byte
	n, err := io.ReadAtLeast(src, one[:], 1)
	switch {
	case n > 0:
		return nil, fmt.Errorf("%w: input continues past the %d data bytes declared by dimensions %v", ErrIDXTrailing, size, dims)
	case gz && errors.Is(err, gzip.ErrHeader):
		return nil, fmt.Errorf("%w: non-gzip bytes follow the gzip stream", ErrIDXTrailing)
	case err != io.EOF:
		return nil, classify(err, gz, "end of the gzip stream")
	}
	return &IDX{Dims: dims, Data: data}, nil
}

// readPayload reads exactly n bytes, growing its buffer as the bytes arrive
// (from idxReadChunk, doubling, never past n), so the memory held is at most
// about twice what the input actually delivered. On error it returns the
// bytes read so far.
func readPayload(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, idxReadChunk))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(n, 2*cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		m, err := io.ReadFull(r, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// classify wraps a read error met while reading part of the file (what) in
// the matching sentinel: end of input is truncation, deflate and checksum
// failures are corruption, anything else (an I/O error) is passed through.
func classify(err error, gz bool, what string) error {
	var corrupt flate.CorruptInputError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		if gz {
			return fmt.Errorf("%w: gzip stream ends early, in the %s", ErrIDXTruncated, what)
		}
		return fmt.Errorf("%w: input ends early, in the %s", ErrIDXTruncated, what)
	case errors.As(err, &corrupt), errors.Is(err, gzip.ErrChecksum), errors.Is(err, gzip.ErrHeader):
		return fmt.Errorf("%w: reading the %s: %w", ErrIDXCorrupt, what, err)
	}
	return fmt.Errorf("reading the IDX %s: %w", what, err)
}
