package safetensors

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// manyTensors is a header of n zero-size tensors named with names of
// nameLen bytes (distinct), padded to a multiple of 8.
func manyTensors(n, nameLen int) []byte {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		name := fmt.Sprintf("%0*d", nameLen, i)
		fmt.Fprintf(&b, `"%s":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}`, name)
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return []byte(b.String())
}

// allocs is the bytes f allocates.
func allocs(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Hostile headers within the format's 100 MiB are refused at the limit
// they exceed, with an error naming it, after reading and allocating in
// proportion to the limits, not to the header.
func TestLimitsRefuseHostileHeaders(t *testing.T) {
	lim := DefaultLimits()
	dims := strings.TrimSuffix(strings.Repeat("1,", lim.Dims+1), ",")
	meta := make([]string, lim.MetadataEntries+1)
	for i := range meta {
		meta[i] = fmt.Sprintf(`"k%d":""`, i)
	}
	cases := []struct {
		name, want string
		header     []byte
	}{
		{"tensor count", fmt.Sprintf("more than %d tensors (the limit)", lim.Tensors), manyTensors(lim.Tensors+1, 6)},
		{"name length", fmt.Sprintf("tensor name of %d bytes exceeds the limit of %d", lim.NameBytes+1, lim.NameBytes), manyTensors(1, lim.NameBytes+1)},
		{"dimensions", fmt.Sprintf("more than %d dimensions (the limit)", lim.Dims), []byte(`{"a":{"dtype":"U8","shape":[` + dims + `],"data_offsets":[0,1]}}`)},
		{"metadata entries", fmt.Sprintf("more than %d entries (the limit)", lim.MetadataEntries), []byte(`{"__metadata__":{` + strings.Join(meta, ",") + `}}`)},
		{"metadata key", "key of 1025 bytes exceeds the limit of 1024", []byte(`{"__metadata__":{"` + strings.Repeat("k", 1025) + `":""}}`)},
		{"entry fields", "more than 8 fields", []byte(`{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1],"b":1,"c":1,"d":1,"e":1,"f":1,"g":1}}`)},
		{"long offsets", `array "data_offsets" has more than 8 values`, []byte(`{"a":{"dtype":"U8","shape":[],"data_offsets":[0,1,2,3,4,5,6,7,8,9]}}`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := file(string(c.header), nil)
			var err error
			used := allocs(func() { _, err = Parse(in) })
			require.ErrorIs(t, err, ErrFormat)
			require.ErrorContains(t, err, c.want)
			// Scanning up to the limit costs a few times the bytes scanned.
			require.Less(t, used, uint64(32*len(in)+(1<<20)), "allocated %d bytes for a %d-byte header", used, len(in))
			_, rerr := Read(bytes.NewReader(in))
			require.Equal(t, err.Error(), rerr.Error())
		})
	}
}

// A header longer than HeaderBytes is refused from its length alone:
// nothing of it is read.
func TestLimitsHeaderBytes(t *testing.T) {
	lim := DefaultLimits()
	in := binary.LittleEndian.AppendUint64(nil, uint64(lim.HeaderBytes)+1)
	_, err := Parse(in)
	require.ErrorContains(t, err, fmt.Sprintf("exceeds the limit of %d bytes", lim.HeaderBytes))

	// A tighter caller limit applies; limits above the format's are refused.
	small := lim
	small.HeaderBytes = 64
	_, err = ParseLimits(file(string(manyTensors(2, 40)), nil), small)
	require.ErrorContains(t, err, "exceeds the limit of 64 bytes")
	small.Tensors = 1
	small.HeaderBytes = 1 << 10
	_, err = ParseLimits(file(string(manyTensors(2, 4)), nil), small)
	require.ErrorContains(t, err, "more than 1 tensors")
	big := lim
	big.HeaderBytes = MaxHeaderSize + 1
	_, err = ParseLimits(file("{}", nil), big)
	require.ErrorContains(t, err, "limit on header bytes")

	// At the limits, a file is accepted.
	f, err := Parse(file(string(manyTensors(1000, lim.NameBytes)), nil))
	require.NoError(t, err)
	require.Len(t, f.Tensors, 1000)
}

// The writer refuses what the reader would.
func TestWriteHonoursLimits(t *testing.T) {
	lim := DefaultLimits()
	_, err := Marshal([]Tensor{{Name: strings.Repeat("n", lim.NameBytes+1), DType: U8, Shape: []int{0}}}, nil)
	require.ErrorContains(t, err, "exceeds the limit")
	_, err = Marshal([]Tensor{{Name: "a", DType: U8, Shape: make([]int, lim.Dims+1)}}, nil)
	require.ErrorContains(t, err, "over the limit")
	meta := map[string]string{}
	for i := range lim.MetadataEntries + 1 {
		meta[fmt.Sprint(i)] = ""
	}
	_, err = Marshal(nil, meta)
	require.ErrorContains(t, err, "metadata entries exceed")
}

// ReadFile refuses a file whose data section is not the length its header
// needs before reading that section, and refuses what is not a regular
// file.
func TestReadFileChecksSizeFirst(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.safetensors")
	h := `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`
	fh, err := os.Create(path)
	require.NoError(t, err)
	_, err = fh.Write(file(h, []byte{1}))
	require.NoError(t, err)
	require.NoError(t, fh.Truncate(1<<30)) // 1 GiB, sparse: trailing bytes
	require.NoError(t, fh.Close())
	var rerr error
	used := allocs(func() { _, rerr = ReadFile(path) })
	require.ErrorContains(t, rerr, "trailing bytes")
	require.ErrorContains(t, rerr, path)
	require.Less(t, used, uint64(1<<20))

	_, err = ReadFile(dir)
	require.ErrorContains(t, err, "not a regular file")
}
