package safetensors

// Reading: the decoders Parse and Read, and the strict validation of the
// header they share (parseHeader, parseEntry, checkJSON).

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrFormat}, args...)...)
}

// Parse decodes a whole safetensors file held in b, within DefaultLimits.
// The tensors' Data share b's memory.
func Parse(b []byte) (*File, error) { return ParseLimits(b, DefaultLimits()) }

// ParseLimits is Parse within lim.
func ParseLimits(b []byte, lim Limits) (*File, error) {
	if err := lim.check(); err != nil {
		return nil, err
	}
	if len(b) < 8 {
		return nil, formatErr("%d bytes, shorter than the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if err := checkHeaderLen(n, uint64(len(b)-8), lim); err != nil {
		return nil, err
	}
	f, dataLen, err := parseHeader(b[8:8+n], lim)
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

// Read decodes a safetensors file from r within DefaultLimits, reading it
// to its end. Memory grows with the bytes r actually delivers, not with the
// sizes the file declares: the header is read only up to the limit, and
// the data section only once the header has been validated and its
// tensors found to tile it.
func Read(r io.Reader) (*File, error) { return ReadLimits(r, DefaultLimits()) }

// ReadLimits is Read within lim.
func ReadLimits(r io.Reader, lim Limits) (*File, error) { return readSized(r, -1, lim) }

// readSized reads a file of size bytes (-1: unknown) from r. With the size
// known, a data section of another length than the header's tensors need
// is refused before it is read, and the one that fits is read into a
// buffer of exactly its size.
func readSized(r io.Reader, size int64, lim Limits) (*File, error) {
	if err := lim.check(); err != nil {
		return nil, err
	}
	var nb [8]byte
	if k, err := io.ReadFull(r, nb[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, formatErr("%d bytes, shorter than the 8-byte header length", k)
		}
		return nil, fmt.Errorf("safetensors: reading the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(nb[:])
	avail := uint64(math.MaxUint64)
	if size >= 8 {
		avail = uint64(size) - 8
	}
	if err := checkHeaderLen(n, avail, lim); err != nil {
		return nil, err
	}
	h, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, fmt.Errorf("safetensors: reading the header: %w", err)
	}
	if uint64(len(h)) != n {
		return nil, formatErr("header length %d exceeds the %d bytes that follow it", n, len(h))
	}
	f, dataLen, err := parseHeader(h, lim)
	if err != nil {
		return nil, err
	}
	var data []byte
	if size >= 0 {
		if have := avail - n; have != dataLen {
			return nil, dataLenErr(have, dataLen)
		}
		data = make([]byte, dataLen)
		_, err = io.ReadFull(r, data)
	} else {
		data, err = io.ReadAll(io.LimitReader(r, int64(dataLen)+1))
	}
	if err != nil {
		return nil, fmt.Errorf("safetensors: reading the data: %w", err)
	}
	if uint64(len(data)) != dataLen {
		return nil, dataLenErr(uint64(len(data)), dataLen)
	}
	f.bind(data)
	return f, nil
}

func checkHeaderLen(n, avail uint64, lim Limits) error {
	switch {
	case n == 0:
		return formatErr("header length is 0")
	case n > uint64(lim.HeaderBytes):
		return formatErr("header length %d exceeds the limit of %d bytes", n, lim.HeaderBytes)
	case n > avail:
		return formatErr("header length %d exceeds the %d bytes that follow it", n, avail)
	}
	return nil
}

func dataLenErr(have, want uint64) error {
	if have < want {
		return formatErr("data section is %d bytes but the tensors need %d (truncated file?)", have, want)
	}
	// A reader stops one byte past what the tensors cover, so the size it
	// saw is not the file's: name only what the tensors cover.
	return formatErr("the data section runs past the %d bytes the tensors cover (trailing bytes)", want)
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
func parseHeader(h []byte, lim Limits) (*File, uint64, error) {
	if len(h) == 0 || h[0] != '{' {
		return nil, 0, formatErr("header does not start with '{'")
	}
	end, err := checkJSON(h, lim)
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
// duplicate keys at any depth and within lim (walk), and returns the
// offset just past it.
func checkJSON(h []byte, lim Limits) (int, error) {
	dec := json.NewDecoder(bytes.NewReader(h))
	dec.UseNumber()
	s := &scan{dec: dec, lim: lim}
	if err := s.walk(0, ""); err != nil {
		return 0, err
	}
	return int(dec.InputOffset()), nil
}

// maxEntryFields bounds the fields of a tensor entry and the values of an
// array other than a shape (data_offsets has 2): a few more than valid, so
// that a stray field or value gets parseEntry's precise error.
const maxEntryFields = 8

// maxDepth bounds nesting: a valid header is an object (depth 0) of
// objects (1) holding arrays (2) of numbers.
const maxDepth = 3

// scan walks a header's JSON tokens, checking Limits as it goes.
type scan struct {
	dec     *json.Decoder
	lim     Limits
	tensors int
}

// walk reads one JSON value at depth (key: the key it is the value of, ""
// at the top), refusing duplicate keys and, at each level, what exceeds
// the limits: at the top, tensor names longer than NameBytes and more than
// Tensors tensors; in __metadata__, keys longer than NameBytes and more
// than MetadataEntries of them; in a tensor entry, more than its three
// keys; arrays longer than Dims (a shape) or 2 (data_offsets).
func (s *scan) walk(depth int, key string) error {
	tok, err := s.dec.Token()
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
		for s.dec.More() {
			k, err := s.dec.Token()
			if err != nil {
				return formatErr("header JSON: %v", err)
			}
			name, ok := k.(string)
			if !ok {
				return formatErr("header JSON: object key %v is not a string", k)
			}
			if seen[name] {
				return formatErr("header JSON: key %q appears twice in one object", name)
			}
			seen[name] = true
			if err := s.key(depth, key, name, len(seen)); err != nil {
				return err
			}
			if err := s.walk(depth+1, name); err != nil {
				return err
			}
		}
	case '[':
		n, most := 0, maxEntryFields
		if key == "shape" {
			most = s.lim.Dims
		}
		for s.dec.More() {
			if n++; n > most {
				if key == "shape" {
					return formatErr("a shape has more than %d dimensions (the limit)", most)
				}
				return formatErr("header JSON: array %q has more than %d values", key, most)
			}
			if err := s.walk(depth+1, ""); err != nil {
				return err
			}
		}
	default:
		return formatErr("header JSON: unexpected %v", d)
	}
	if _, err := s.dec.Token(); err != nil { // the closing delimiter
		return formatErr("header JSON: %v", err)
	}
	return nil
}

// key checks the count-th key name of an object at depth, the value of
// parent, against the limits.
func (s *scan) key(depth int, parent, name string, count int) error {
	switch {
	case depth == 0 && name == MetadataKey:
	case depth == 0:
		if len(name) > s.lim.NameBytes {
			return formatErr("a tensor name of %d bytes exceeds the limit of %d", len(name), s.lim.NameBytes)
		}
		if s.tensors++; s.tensors > s.lim.Tensors {
			return formatErr("more than %d tensors (the limit)", s.lim.Tensors)
		}
	case depth == 1 && parent == MetadataKey:
		if len(name) > s.lim.NameBytes {
			return formatErr("a %s key of %d bytes exceeds the limit of %d", MetadataKey, len(name), s.lim.NameBytes)
		}
		if count > s.lim.MetadataEntries {
			return formatErr("%s has more than %d entries (the limit)", MetadataKey, s.lim.MetadataEntries)
		}
	case count > maxEntryFields:
		return formatErr("tensor %q: more than %d fields (a tensor has dtype, shape and data_offsets)", parent, maxEntryFields)
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
