package datasets

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// idxBytes builds an IDX file by hand (independently of WriteIDX).
func idxBytes(typ byte, dims []uint32, data []byte) []byte {
	b := []byte{0, 0, typ, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, data...)
}

// gzipBytes compresses b.
func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

func TestReadIDXRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		dims []int
	}{
		{"images", []int{3, 4, 5}},
		{"labels", []int{17}},
		{"empty", []int{0, 28, 28}},
		{"4d", []int{2, 1, 3, 2}},
	}
	for _, tc := range cases {
		n := 1
		dims32 := make([]uint32, len(tc.dims))
		for i, d := range tc.dims {
			n *= d
			dims32[i] = uint32(d)
		}
		data := seq(n)
		plain := idxBytes(IDXTypeUint8, dims32, data)

		var written bytes.Buffer
		require.NoError(t, WriteIDX(&written, tc.dims, data))
		assert.Equal(t, plain, written.Bytes(), "%s: WriteIDX output", tc.name)

		for _, enc := range []struct {
			name string
			b    []byte
		}{{"plain", plain}, {"gzip", gzipBytes(t, plain)}} {
			t.Run(tc.name+"/"+enc.name, func(t *testing.T) {
				x, err := ReadIDX(bytes.NewReader(enc.b))
				require.NoError(t, err)
				assert.Equal(t, tc.dims, x.Dims)
				assert.Equal(t, n, x.NumElements())
				assert.Equal(t, data, x.Data)
				assert.Equal(t, n, cap(x.Data), "payload buffer has no slack")
			})
		}
	}
}

func TestReadIDXLargeRoundTrip(t *testing.T) {
	// Larger than the first read chunk, to exercise buffer growth.
	dims := []int{3*idxReadChunk + 5}
	data := seq(dims[0])
	var buf bytes.Buffer
	require.NoError(t, WriteIDX(&buf, dims, data))
	for _, b := range [][]byte{buf.Bytes(), gzipBytes(t, buf.Bytes())} {
		x, err := ReadIDX(bytes.NewReader(b))
		require.NoError(t, err)
		assert.Equal(t, dims, x.Dims)
		assert.True(t, bytes.Equal(data, x.Data))
	}
}

func TestReadIDXErrors(t *testing.T) {
	valid := idxBytes(8, []uint32{2, 3}, seq(6))
	gzValid := gzipBytes(t, valid)
	badCRC := append([]byte(nil), gzValid...)
	badCRC[len(badCRC)-8] ^= 0xff // CRC-32 in the gzip trailer

	cases := []struct {
		name string
		in   []byte
		want error
		text string
	}{
		{"empty", nil, ErrIDXTruncated, "empty input"},
		{"bad magic", []byte{0x12, 0x34, 8, 1, 0, 0, 0, 1, 0}, ErrIDXHeader, "magic number 12 34 08 01 does not start with 00 00"},
		{"float type", idxBytes(0x0D, []uint32{1}, []byte{0, 0, 0, 0}), ErrIDXType, "type code 0x0D (float32); only 0x08 (unsigned byte) is supported"},
		{"int32 type", idxBytes(0x0C, []uint32{1}, []byte{0, 0, 0, 0}), ErrIDXType, "type code 0x0C (int32)"},
		{"unknown type", idxBytes(0x42, []uint32{1}, []byte{0}), ErrIDXType, "type code 0x42 (unknown)"},
		{"zero dims", []byte{0, 0, 8, 0}, ErrIDXHeader, "zero dimensions"},
		{"truncated magic", []byte{0, 0, 8}, ErrIDXTruncated, "input ends early, in the magic number (got 3 of 4 bytes)"},
		{"truncated dims", []byte{0, 0, 8, 3, 0, 0, 0, 1, 0, 0}, ErrIDXTruncated, "dimensions (got 6 of 12 header bytes for 3 dimensions)"},
		{"truncated data", idxBytes(8, []uint32{10}, seq(5)), ErrIDXTruncated, "data (got 5 of 10 bytes for dimensions [10])"},
		{"no data", idxBytes(8, []uint32{60000, 28, 28}, nil), ErrIDXTruncated, "got 0 of 47040000 bytes"},
		{"trailing byte", append(append([]byte(nil), valid...), 0), ErrIDXTrailing, "input continues past the 6 data bytes declared by dimensions [2 3]"},
		{"giant dims", idxBytes(8, []uint32{0xffffffff, 0xffffffff, 0xffffffff}, nil), ErrIDXTooLarge,
			"dimensions [4294967295 4294967295 4294967295] declare about 7.92e+28 bytes, over the 2147483648-byte limit"},
		{"giant one dim", idxBytes(8, []uint32{1, 0xffffffff}, seq(3)), ErrIDXTooLarge, "over the 2147483648-byte limit"},
		{"giant with zero dim", idxBytes(8, []uint32{0, 0xffffffff, 0xffffffff}, nil), ErrIDXTooLarge, "declare about 1.84e+19 bytes"},
		{"gzip truncated", gzValid[:len(gzValid)-12], ErrIDXTruncated, "gzip stream ends early"},
		{"gzip truncated trailer", gzValid[:len(gzValid)-3], ErrIDXTruncated, "gzip stream ends early, in the end of the gzip stream"},
		{"gzip bad checksum", badCRC, ErrIDXCorrupt, "checksum"},
		{"gzip header cut", gzValid[:5], ErrIDXTruncated, "gzip stream ends early, in the gzip header"},
		{"gzip bad method", []byte{0x1f, 0x8b, 7, 0, 0, 0, 0, 0, 0, 0, 0}, ErrIDXCorrupt, "gzip header: gzip: invalid header"},
		{"gzip bad deflate", append(append([]byte(nil), gzValid[:10]...), 0xff, 0xff, 0xff, 0xff), ErrIDXCorrupt, "flate: corrupt input"},
		{"gzip then garbage", append(append([]byte(nil), gzValid...), "garbage!!!!!"...), ErrIDXTrailing, "non-gzip bytes follow the gzip stream"},
		{"gzip trailing inside", gzipBytes(t, append(append([]byte(nil), valid...), 1, 2)), ErrIDXTrailing, "past the 6 data bytes"},
		{"gzip bad magic", gzipBytes(t, []byte("hello world")), ErrIDXHeader, "68 65 6c 6c"},
		{"gzip bad type", gzipBytes(t, idxBytes(0x0E, []uint32{1}, seq(8))), ErrIDXType, "0x0E (float64)"},
		{"gzip giant dims", gzipBytes(t, idxBytes(8, []uint32{1 << 20, 1 << 20}, nil)), ErrIDXTooLarge, "over the 2147483648-byte limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x, err := ReadIDX(bytes.NewReader(tc.in))
			require.Error(t, err)
			assert.Nil(t, x)
			assert.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), tc.text)
			assert.Contains(t, err.Error(), "datasets: ")
		})
	}
}

func TestReadIDXLimit(t *testing.T) {
	in := idxBytes(8, []uint32{3, 4}, seq(12))
	_, err := ReadIDXLimit(bytes.NewReader(in), 11)
	assert.ErrorIs(t, err, ErrIDXTooLarge)
	assert.Contains(t, err.Error(), "declare about 12 bytes, over the 11-byte limit")
	x, err := ReadIDXLimit(bytes.NewReader(in), 12)
	require.NoError(t, err)
	assert.Equal(t, []int{3, 4}, x.Dims)
	_, err = ReadIDXLimit(bytes.NewReader(in), 0) // 0: the default limit
	require.NoError(t, err)
}

type failingReader struct{ after []byte }

var errDisk = errors.New("disk on fire")

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.after) == 0 {
		return 0, errDisk
	}
	n := copy(p, r.after)
	r.after = r.after[n:]
	return n, nil
}

func TestReadIDXPassesIOErrors(t *testing.T) {
	_, err := ReadIDX(&failingReader{after: idxBytes(8, []uint32{100}, seq(10))})
	assert.ErrorIs(t, err, errDisk)
	assert.Contains(t, err.Error(), "reading the IDX data")
}

func TestReadIDXFileNamesPath(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good-idx1-ubyte.gz")
	require.NoError(t, os.WriteFile(good, gzipBytes(t, idxBytes(8, []uint32{4}, seq(4))), 0o644))
	x, err := ReadIDXFile(good)
	require.NoError(t, err)
	assert.Equal(t, seq(4), x.Data)

	bad := filepath.Join(dir, "bad-idx1-ubyte")
	require.NoError(t, os.WriteFile(bad, idxBytes(8, []uint32{4}, seq(2)), 0o644))
	_, err = ReadIDXFile(bad)
	assert.ErrorIs(t, err, ErrIDXTruncated)
	assert.Contains(t, err.Error(), bad)

	missing := filepath.Join(dir, "missing")
	_, err = ReadIDXFile(missing)
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), missing)
}

func TestWriteIDXErrors(t *testing.T) {
	assert.ErrorContains(t, WriteIDX(io.Discard, nil, nil), "0 dimensions")
	assert.ErrorContains(t, WriteIDX(io.Discard, []int{2, 2}, seq(3)), "hold 4 elements, data has 3")
	assert.ErrorContains(t, WriteIDX(io.Discard, []int{-1}, nil), "dimension 0 is -1")
}

// allocatedBy returns the bytes allocated while f runs.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestReadIDXHugeDeclaredSizeAllocatesLittle(t *testing.T) {
	// 1 GiB + 1 GiB/2 declared: under the 2 GiB limit, so only truncation stops it.
	in := idxBytes(8, []uint32{3, 1 << 29}, seq(1000))
	for _, b := range [][]byte{in, gzipBytes(t, in)} {
		var err error
		alloc := allocatedBy(func() { _, err = ReadIDX(bytes.NewReader(b)) })
		assert.ErrorIs(t, err, ErrIDXTruncated)
		assert.Contains(t, err.Error(), "got 1000 of 1610612736 bytes")
		assert.Less(t, alloc, uint64(1<<20), "allocated %d bytes for a %d-byte input", alloc, len(b))
	}
}
