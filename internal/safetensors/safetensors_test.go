package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func sample(t testing.TB) ([]Tensor, map[string]string) {
	t.Helper()
	w, err := New("layer.w", []int{2, 3}, []float32{1, -2, 3.5, float32(math.Inf(1)), 0, -0.25})
	require.NoError(t, err)
	b, err := New("layer.b", []int{3}, []float64{0.1, math.NaN(), -7})
	require.NoError(t, err)
	step, err := New("step", []int{}, []int64{42})
	require.NoError(t, err)
	mask, err := New("mask", []int{4}, []uint8{1, 0, 1, 1})
	require.NoError(t, err)
	empty, err := New("empty", []int{0, 5}, []float32{})
	require.NoError(t, err)
	h, err := New("half", []int{1}, []int16{-3})
	require.NoError(t, err)
	return []Tensor{w, b, step, mask, empty, h}, map[string]string{"format": "pt", "note": "quotes \" and \\ and ünïcode"}
}

func TestRoundTrip(t *testing.T) {
	tensors, meta := sample(t)
	b, err := Marshal(tensors, meta)
	require.NoError(t, err)

	n := binary.LittleEndian.Uint64(b[:8])
	require.Zero(t, n%8, "header padded to 8 bytes")
	require.Equal(t, byte('{'), b[8])

	for _, parse := range []func([]byte) (*File, error){
		Parse,
		func(b []byte) (*File, error) { return Read(bytes.NewReader(b)) },
	} {
		f, err := parse(b)
		require.NoError(t, err)
		require.Equal(t, meta, f.Metadata)
		require.Len(t, f.Tensors, len(tensors))
		for _, want := range tensors {
			got, ok := f.Tensor(want.Name)
			require.True(t, ok, want.Name)
			require.Equal(t, want.DType, got.DType, want.Name)
			require.Equal(t, want.Shape, got.Shape, want.Name)
			require.Equal(t, want.Data, got.Data, want.Name)
		}
		// Data order: element size descending, then name; each aligned.
		require.Equal(t, []string{"layer.b", "step", "empty", "layer.w", "half", "mask"}, f.Names())
		off := 8 + int(n)
		for _, tn := range f.Tensors {
			require.Zero(t, off%tn.DType.Size(), "%s aligned", tn.Name)
			off += len(tn.Data)
		}
		require.Equal(t, DataSHA256(tensors), f.DataSHA256())
		w, err := Values[float32](mustTensor(t, f, "layer.w"))
		require.NoError(t, err)
		require.Equal(t, float32(3.5), w[2])
		require.True(t, math.IsInf(float64(w[3]), 1))
		bb, err := Float64s(mustTensor(t, f, "layer.b"))
		require.NoError(t, err)
		require.True(t, math.IsNaN(bb[1]))
		ww, err := Float64s(mustTensor(t, f, "layer.w"))
		require.NoError(t, err)
		require.Equal(t, -0.25, ww[5])
		_, err = Values[float64](mustTensor(t, f, "layer.w"))
		require.ErrorContains(t, err, "is F32, want F64")
	}
}

func mustTensor(t *testing.T, f *File, name string) Tensor {
	t.Helper()
	x, ok := f.Tensor(name)
	require.True(t, ok, name)
	return x
}

func TestDeterministic(t *testing.T) {
	tensors, meta := sample(t)
	a, err := Marshal(tensors, meta)
	require.NoError(t, err)
	rev := make([]Tensor, len(tensors))
	for i, x := range tensors {
		rev[len(tensors)-1-i] = x
	}
	b, err := Marshal(rev, meta)
	require.NoError(t, err)
	require.Equal(t, a, b, "input order must not matter")
	// Re-encoding a parsed file gives the same bytes.
	f, err := Parse(a)
	require.NoError(t, err)
	c, err := Marshal(f.Tensors, f.Metadata)
	require.NoError(t, err)
	require.Equal(t, a, c)
}

// TestKnownBytes pins the exact encoding of a small file against bytes
// written out by hand from the format description.
func TestKnownBytes(t *testing.T) {
	x, err := New("x", []int{2}, []float32{1, 2})
	require.NoError(t, err)
	b, err := Marshal([]Tensor{x}, map[string]string{"k": "v"})
	require.NoError(t, err)
	h := `{"__metadata__":{"k":"v"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	for len(h)%8 != 0 {
		h += " "
	}
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	want = append(want, h...)
	want = append(want, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40)
	require.Equal(t, want, b)
}

func TestWriteErrors(t *testing.T) {
	ok, err := New("a", []int{1}, []float32{1})
	require.NoError(t, err)
	cases := map[string][]Tensor{
		"appears twice":       {ok, ok},
		"reserved":            {{Name: MetadataKey, DType: F32, Shape: []int{1}, Data: make([]byte, 4)}},
		"unknown dtype":       {{Name: "a", DType: "F128", Shape: []int{1}, Data: make([]byte, 16)}},
		"bytes of data, want": {{Name: "a", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}},
		"dimension 0 is -1":   {{Name: "a", DType: F32, Shape: []int{-1}}},
		"overflows":           {{Name: "a", DType: F64, Shape: []int{math.MaxInt / 2, 4}}},
	}
	for want, tensors := range cases {
		var buf bytes.Buffer
		err := Write(&buf, tensors, nil)
		require.ErrorContains(t, err, want)
		require.Zero(t, buf.Len(), "nothing written on error")
	}
	_, err = New("a", []int{3}, []float32{1, 2})
	require.ErrorContains(t, err, "3 elements, got 2 values")
}

// file builds a file from a raw header string and data.
func file(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func TestReadErrors(t *testing.T) {
	e := func(name, dtype, shape string, begin, end int) string {
		return fmt.Sprintf(`"%s":{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}`, name, dtype, shape, begin, end)
	}
	d8 := make([]byte, 8)
	cases := []struct {
		name, want string
		in         []byte
	}{
		{"empty", "shorter than the 8-byte", nil},
		{"short", "shorter than the 8-byte", []byte{1, 2, 3}},
		{"zero header", "header length is 0", file("", nil)},
		{"huge header", "exceeds the limit", binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1)},
		{"header past end", "exceeds the 3 bytes", append(binary.LittleEndian.AppendUint64(nil, 1000), "{} "...)},
		{"max uint64 header", "exceeds the limit", binary.LittleEndian.AppendUint64(nil, math.MaxUint64)},
		{"not an object", "does not start with '{'", file(`[1,2]   `, nil)},
		{"leading space", "does not start with '{'", file(` {}`, nil)},
		{"bad json", "header JSON", file(`{"a":`, nil)},
		{"trailing garbage", "want space padding", file(`{}x`, nil)},
		{"trailing newline", "want space padding", file("{}\n", nil)},
		{"two objects", "want space padding", file(`{}{}`, nil)},
		{"duplicate tensor", "appears twice", file(`{`+e("a", "U8", "[1]", 0, 1)+`,`+e("a", "U8", "[1]", 0, 1)+`}`, []byte{1})},
		{"duplicate field", "appears twice", file(`{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{1})},
		{"duplicate metadata", "appears twice", file(`{"__metadata__":{"k":"a","k":"b"}}`, nil)},
		{"metadata not strings", "map strings to strings", file(`{"__metadata__":{"k":1}}`, nil)},
		{"metadata array", "map strings to strings", file(`{"__metadata__":[]}`, nil)},
		{"unknown field", `unknown field "extra"`, file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}}`, []byte{1})},
		{"entry not object", "tensor \"a\"", file(`{"a":5}`, nil)},
		{"missing dtype", "missing dtype", file(`{"a":{"shape":[1],"data_offsets":[0,1]}}`, []byte{1})},
		{"missing shape", "missing shape", file(`{"a":{"dtype":"U8","data_offsets":[0,1]}}`, []byte{1})},
		{"null shape", "missing shape", file(`{"a":{"dtype":"U8","shape":null,"data_offsets":[0,1]}}`, []byte{1})},
		{"missing offsets", "missing data_offsets", file(`{"a":{"dtype":"U8","shape":[1]}}`, []byte{1})},
		{"unknown dtype", `unknown dtype "F128"`, file(`{`+e("a", "F128", "[1]", 0, 16)+`}`, make([]byte, 16))},
		{"negative dim", "dimension 0 is -1", file(`{`+e("a", "U8", "[-1]", 0, 0)+`}`, nil)},
		{"fractional dim", "tensor \"a\"", file(`{`+e("a", "U8", "[1.5]", 0, 1)+`}`, []byte{1})},
		{"overflow", "overflows", file(`{`+e("a", "F64", "[4294967296,4294967296]", 0, 8)+`}`, d8)},
		{"overflow bytes", "overflow", file(`{`+e("a", "F64", "[9223372036854775807]", 0, 8)+`}`, d8)},
		{"three offsets", "has 3 values, want 2", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, []byte{1})},
		{"negative offset", "tensor \"a\"", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, []byte{1})},
		{"reversed offsets", "end before they begin", file(`{`+e("a", "U8", "[0]", 5, 4)+`}`, nil)},
		{"size mismatch", "needs 8 bytes but data_offsets [0,4] hold 4", file(`{`+e("a", "F32", "[2]", 0, 4)+`}`, d8[:4])},
		{"gap at start", "leave a gap", file(`{`+e("a", "U8", "[1]", 1, 2)+`}`, []byte{0, 1})},
		{"gap between", "leave a gap", file(`{`+e("a", "U8", "[1]", 0, 1)+`,`+e("b", "U8", "[1]", 2, 3)+`}`, []byte{0, 1, 2})},
		{"overlap", "overlap", file(`{`+e("a", "U8", "[2]", 0, 2)+`,`+e("b", "U8", "[2]", 1, 3)+`}`, []byte{0, 1, 2})},
		{"same range", "overlap", file(`{`+e("a", "U8", "[2]", 0, 2)+`,`+e("b", "U8", "[2]", 0, 2)+`}`, []byte{0, 1})},
		{"truncated data", "truncated", file(`{`+e("a", "F64", "[1]", 0, 8)+`}`, d8[:7])},
		{"trailing data", "trailing bytes", file(`{`+e("a", "U8", "[1]", 0, 1)+`}`, []byte{1, 2})},
		{"huge offsets", "tensor \"b\"", file(`{`+e("a", "U8", "[1]", 0, 1)+`,"b":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]}}`, []byte{1})},
		{"deep nesting", "nested deeper", file(`{"__metadata__":`+strings.Repeat("[", 50)+strings.Repeat("]", 50)+`}`, nil)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.in)
			require.ErrorContains(t, err, c.want)
			require.ErrorIs(t, err, ErrFormat)
			_, err = Read(bytes.NewReader(c.in))
			require.ErrorContains(t, err, c.want)
			require.ErrorIs(t, err, ErrFormat)
		})
	}
}

func TestReadAcceptsSpecVariants(t *testing.T) {
	// No metadata, a scalar, a zero-size tensor sharing an offset, keys
	// in any order, whitespace inside the JSON, no padding.
	h := `{ "b" : {"shape":[], "data_offsets":[0,8], "dtype":"I64"}, "z":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},
	"a":{"data_offsets":[8,9],"dtype":"BOOL","shape":[1]} }`
	in := file(h, append(binary.LittleEndian.AppendUint64(nil, 7), 1))
	f, err := Parse(in)
	require.NoError(t, err)
	require.Nil(t, f.Metadata)
	require.Equal(t, []string{"b", "z", "a"}, f.Names())
	v, err := Values[int64](mustTensor(t, f, "b"))
	require.NoError(t, err)
	require.Equal(t, []int64{7}, v)
	require.Empty(t, mustTensor(t, f, "z").Data)
}

// TestReadBoundedAllocation: a header that declares 100 MiB but is followed
// by a few bytes must not make Read allocate anywhere near 100 MiB.
func TestReadBoundedAllocation(t *testing.T) {
	in := append(binary.LittleEndian.AppendUint64(nil, MaxHeaderSize), `{"a":`...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Read(bytes.NewReader(in))
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, ErrFormat)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20))

	// Declared data far beyond what follows.
	h := `{"a":{"dtype":"F64","shape":[1000000000],"data_offsets":[0,8000000000]}}`
	in = file(h, []byte{1, 2, 3})
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = Read(bytes.NewReader(in))
	runtime.ReadMemStats(&after)
	require.ErrorContains(t, err, "truncated")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20))
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestReadIOError(t *testing.T) {
	_, err := Read(failingReader{})
	require.ErrorContains(t, err, "disk on fire")
	require.NotErrorIs(t, err, ErrFormat)
	_, err = Read(io.MultiReader(bytes.NewReader(binary.LittleEndian.AppendUint64(nil, 16)), failingReader{}))
	require.ErrorContains(t, err, "disk on fire")
}

func TestAtomicWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt.safetensors")
	tensors, meta := sample(t)
	require.NoError(t, WriteFile(path, 0o600, tensors, meta))
	f, err := ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, meta, f.Metadata)
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Zero(t, st.Mode().Perm()&^0o600, "mode %v: readable by others", st.Mode().Perm())

	// Overwrite; a failing writer leaves the old file and no temporary.
	require.NoError(t, WriteFile(path, 0o600, tensors[:1], nil))
	err = AtomicWriteFile(path, func(w io.Writer) error {
		_, _ = w.Write([]byte("partial"))
		return errors.New("boom")
	})
	require.ErrorContains(t, err, "boom")
	require.ErrorContains(t, err, path)
	f, err = ReadFile(path)
	require.NoError(t, err)
	require.Len(t, f.Tensors, 1)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary files left")

	// Invalid tensors: nothing replaces the file.
	err = WriteFile(path, 0o600, []Tensor{{Name: "x", DType: "nope"}}, nil)
	require.ErrorContains(t, err, "unknown dtype")
	f, err = ReadFile(path)
	require.NoError(t, err)
	require.Len(t, f.Tensors, 1)

	// Missing directory.
	require.Error(t, WriteFile(filepath.Join(dir, "no", "such", "x.safetensors"), 0o600, tensors, nil))

	// ReadFile names the path on a format error.
	bad := filepath.Join(dir, "bad.safetensors")
	require.NoError(t, os.WriteFile(bad, []byte("garbage!garbage!"), 0o644))
	_, err = ReadFile(bad)
	require.ErrorContains(t, err, bad)
	require.ErrorIs(t, err, ErrFormat)
}
