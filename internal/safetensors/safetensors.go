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
// the input merely declares: the header length is bounded (MaxHeaderSize and
// the input's length); the header must be one JSON object starting with '{'
// followed only by spaces, with no duplicate keys at any level and no
// unknown fields in a tensor entry; every dtype must be known, every
// dimension non-negative, the byte length (shape product × dtype size,
// computed with overflow checks) must equal end-begin, and the tensors must
// tile the data section exactly: sorted by offset they start at 0, are
// contiguous, do not overlap and end at its last byte.
//
// WriteFile writes atomically (temporary file in the target directory,
// fsync, rename, fsync of the directory), so a crash leaves either the old
// file or the new one, never a torn one.
package safetensors

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
)

// MaxHeaderSize bounds the header length a reader accepts (100 MiB), as the
// reference implementation does.
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

// order sorts tensors into the writer's data-section order: element size
// descending, then name.
func order(tensors []Tensor) []Tensor {
	out := slices.Clone(tensors)
	sort.SliceStable(out, func(i, j int) bool {
		si, sj := out[i].DType.Size(), out[j].DType.Size()
		if si != sj {
			return si > sj
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// DataSHA256 returns the hex SHA-256 of the data section that Write would
// produce for tensors (their bytes in the writer's order), so a checksum of
// the data can be put in the metadata before writing.
func DataSHA256(tensors []Tensor) string {
	h := sha256.New()
	for _, t := range order(tensors) {
		h.Write(t.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// header builds the padded header for tensors (already in order).
func header(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	comma := func() {
		if !first {
			b.WriteByte(',')
		}
		first = false
	}
	str := func(s string) {
		enc, _ := json.Marshal(s) // a string always marshals
		b.Write(enc)
	}
	if len(metadata) > 0 {
		comma()
		str(MetadataKey)
		b.WriteString(":{")
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			str(k)
			b.WriteByte(':')
			str(metadata[k])
		}
		b.WriteByte('}')
	}
	seen := make(map[string]bool, len(tensors))
	off := 0
	for _, t := range tensors {
		if err := t.check(); err != nil {
			return nil, err
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("safetensors: tensor name %q appears twice", t.Name)
		}
		seen[t.Name] = true
		comma()
		str(t.Name)
		fmt.Fprintf(&b, `:{"dtype":"%s","shape":[`, t.DType)
		for i, d := range t.Shape {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprint(&b, d)
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, off, off+len(t.Data))
		off += len(t.Data)
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	if b.Len() > MaxHeaderSize {
		return nil, fmt.Errorf("safetensors: header of %d bytes exceeds %d", b.Len(), MaxHeaderSize)
	}
	return b.Bytes(), nil
}

// Write writes tensors and metadata to w in the safetensors format (see the
// package documentation for the deterministic layout). It validates every
// tensor (known dtype, data length matching the shape, unique names) before
// writing anything.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	ordered := order(tensors)
	h, err := header(ordered, metadata)
	if err != nil {
		return err
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(h)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(h); err != nil {
		return err
	}
	for _, t := range ordered {
		if _, err := w.Write(t.Data); err != nil {
			return err
		}
	}
	return nil
}

// Marshal returns the bytes Write would write.
func Marshal(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	var b bytes.Buffer
	if err := Write(&b, tensors, metadata); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFormat}, args...)...)
}

// Parse decodes a whole safetensors file held in b. The tensors' Data share
// b's memory.
func Parse(b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, formatErr("%d bytes, shorter than the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if err := checkHeaderLen(n, uint64(len(b)-8)); err != nil {
		return nil, err
	}
	f, dataLen, err := parseHeader(b[8 : 8+n])
	if err != nil {
		return nil, err
	}
	data := b[8+n:]
	if uint64(len(data)) != dataLen {
		return nil, dataLenErr(uint64(len(data)), dataLen)
	}
	f.bind(data)
	return f, nil
}

// Read decodes a safetensors file from r, reading it to its end. Memory
// grows with the bytes r actually delivers, not with the sizes the file
// declares.
func Read(r io.Reader) (*File, error) {
	var nb [8]byte
	if k, err := io.ReadFull(r, nb[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, formatErr("%d bytes, shorter than the 8-byte header length", k)
		}
		return nil, fmt.Errorf("safetensors: reading the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(nb[:])
	if err := checkHeaderLen(n, math.MaxUint64); err != nil {
		return nil, err
	}
	h, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, fmt.Errorf("safetensors: reading the header: %w", err)
	}
	if uint64(len(h)) != n {
		return nil, formatErr("header length %d exceeds the %d bytes that follow it", n, len(h))
	}
	f, dataLen, err := parseHeader(h)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(r, int64(dataLen)+1))
	if err != nil {
		return nil, fmt.Errorf("safetensors: reading the data: %w", err)
	}
	if uint64(len(data)) != dataLen {
		return nil, dataLenErr(uint64(len(data)), dataLen)
	}
	f.bind(data)
	return f, nil
}

func checkHeaderLen(n, avail uint64) error {
	switch {
	case n == 0:
		return formatErr("header length is 0")
	case n > MaxHeaderSize:
		return formatErr("header length %d exceeds the limit of %d bytes", n, MaxHeaderSize)
	case n > avail:
		return formatErr("header length %d exceeds the %d bytes that follow it", n, avail)
	}
	return nil
}

func dataLenErr(have, want uint64) error {
	if have < want {
		return formatErr("data section is %d bytes but the tensors need %d (truncated file?)", have, want)
	}
	return formatErr("data section is %d bytes but the tensors cover only %d (trailing bytes)", have, want)
}

// bind points every tensor at its bytes of data.
func (f *File) bind(data []byte) {
	f.data = data
	for i := range f.Tensors {
		t := &f.Tensors[i]
		begin := int(f.offsets[i][0])
		end := int(f.offsets[i][1])
		t.Data = data[begin:end:end]
	}
	f.offsets = nil
}

// entry is one tensor's header object.
type entry struct {
	DType       *string   `json:"dtype"`
	Shape       *[]int64  `json:"shape"`
	DataOffsets *[]uint64 `json:"data_offsets"`
}

// parseHeader validates the header and returns the file (tensors sorted by
// offset, data not yet bound) and the data section length the tensors need.
func parseHeader(h []byte) (*File, uint64, error) {
	if len(h) == 0 || h[0] != '{' {
		return nil, 0, formatErr("header does not start with '{'")
	}
	end, err := checkJSON(h)
	if err != nil {
		return nil, 0, err
	}
	for i, c := range h[end:] {
		if c != ' ' {
			return nil, 0, formatErr("header byte %d after the JSON object is %q, want space padding", end+i, c)
		}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(h[:end], &raw); err != nil {
		return nil, 0, formatErr("header JSON: %v", err)
	}
	f := &File{}
	if m, ok := raw[MetadataKey]; ok {
		if err := json.Unmarshal(m, &f.Metadata); err != nil {
			return nil, 0, formatErr("%s must map strings to strings: %v", MetadataKey, err)
		}
		delete(raw, MetadataKey)
	}
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	f.Tensors = make([]Tensor, 0, len(names))
	f.offsets = make([][2]uint64, 0, len(names))
	for _, name := range names {
		t, off, err := parseEntry(name, raw[name])
		if err != nil {
			return nil, 0, err
		}
		f.Tensors = append(f.Tensors, t)
		f.offsets = append(f.offsets, off)
	}
	// Sort by (begin, end, name) and check the tensors tile [0, total).
	idx := make([]int, len(f.Tensors))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		oa, ob := f.offsets[idx[a]], f.offsets[idx[b]]
		if oa[0] != ob[0] {
			return oa[0] < ob[0]
		}
		return oa[1] < ob[1]
	})
	tensors := make([]Tensor, len(idx))
	offsets := make([][2]uint64, len(idx))
	var pos uint64
	for k, i := range idx {
		o := f.offsets[i]
		if o[0] != pos {
			if o[0] < pos {
				return nil, 0, formatErr("tensor %q data_offsets [%d,%d] overlap the previous tensor (which ends at %d)",
					f.Tensors[i].Name, o[0], o[1], pos)
			}
			return nil, 0, formatErr("tensor %q data_offsets [%d,%d] leave a gap: the previous tensor ends at %d",
				f.Tensors[i].Name, o[0], o[1], pos)
		}
		pos = o[1]
		tensors[k], offsets[k] = f.Tensors[i], o
	}
	f.Tensors, f.offsets = tensors, offsets
	return f, pos, nil
}

func parseEntry(name string, raw json.RawMessage) (Tensor, [2]uint64, error) {
	var e entry
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&e); err != nil {
		return Tensor{}, [2]uint64{}, formatErr("tensor %q: %v", name, err)
	}
	switch {
	case e.DType == nil:
		return Tensor{}, [2]uint64{}, formatErr("tensor %q: missing dtype", name)
	case e.Shape == nil:
		return Tensor{}, [2]uint64{}, formatErr("tensor %q: missing shape", name)
	case e.DataOffsets == nil:
		return Tensor{}, [2]uint64{}, formatErr("tensor %q: missing data_offsets", name)
	}
	dt := DType(*e.DType)
	if !dt.Valid() {
		return Tensor{}, [2]uint64{}, formatErr("tensor %q: unknown dtype %q", name, *e.DType)
	}
	shape := make([]int, len(*e.Shape))
	for i, d := range *e.Shape {
		if d < 0 {
			return Tensor{}, [2]uint64{}, formatErr("tensor %q: dimension %d is %d", name, i, d)
		}
		if uint64(d) > math.MaxInt {
			return Tensor{}, [2]uint64{}, formatErr("tensor %q: dimension %d is too large", name, i)
		}
		shape[i] = int(d)
	}
	offs := *e.DataOffsets
	if len(offs) != 2 {
		return Tensor{}, [2]uint64{}, formatErr("tensor %q: data_offsets has %d values, want 2", name, len(offs))
	}
	begin, end := offs[0], offs[1]
	if end < begin {
		return Tensor{}, [2]uint64{}, formatErr("tensor %q: data_offsets [%d,%d] end before they begin", name, begin, end)
	}
	if end > math.MaxInt64 {
		return Tensor{}, [2]uint64{}, formatErr("tensor %q: data_offsets [%d,%d] out of range", name, begin, end)
	}
	n, err := numElements(shape)
	if err != nil {
		return Tensor{}, [2]uint64{}, formatErr("tensor %q: %v", name, err)
	}
	want, err := byteLen(n, dt.Size())
	if err != nil {
		return Tensor{}, [2]uint64{}, formatErr("tensor %q: %v", name, err)
	}
	if uint64(want) != end-begin {
		return Tensor{}, [2]uint64{}, formatErr("tensor %q: shape %v of %s needs %d bytes but data_offsets [%d,%d] hold %d",
			name, shape, dt, want, begin, end, end-begin)
	}
	return Tensor{Name: name, DType: dt, Shape: shape}, [2]uint64{begin, end}, nil
}

// checkJSON checks that h starts with exactly one JSON object with no
// duplicate keys at any depth, and returns the offset just past it.
func checkJSON(h []byte) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(h))
	dec.UseNumber()
	if err := walk(dec, 0); err != nil {
		return 0, err
	}
	return int(dec.InputOffset()), nil
}

// maxDepth bounds nesting (a valid header has depth 3).
const maxDepth = 8

func walk(dec *json.Decoder, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return formatErr("header JSON: %v", err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	if depth >= maxDepth {
		return formatErr("header JSON nested deeper than %d", maxDepth)
	}
	switch d {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return formatErr("header JSON: %v", err)
			}
			key, ok := k.(string)
			if !ok {
				return formatErr("header JSON: object key %v is not a string", k)
			}
			if seen[key] {
				return formatErr("header JSON: key %q appears twice in one object", key)
			}
			seen[key] = true
			if err := walk(dec, depth+1); err != nil {
				return err
			}
		}
	case '[':
		for dec.More() {
			if err := walk(dec, depth+1); err != nil {
				return err
			}
		}
	default:
		return formatErr("header JSON: unexpected %v", d)
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return formatErr("header JSON: %v", err)
	}
	return nil
}

// describe is used in error messages about a tensor's dtype.
func describe(dt DType) string {
	if dt.Valid() {
		return string(dt)
	}
	return fmt.Sprintf("unknown dtype %q", strings.ToValidUTF8(string(dt), "?"))
}
