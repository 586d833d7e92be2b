package datasets

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
)

// decodedLen bounds the bytes ReadIDX can get out of in: its length, or for
// gzip input the decompressed length (capped at 64 MiB).
func decodedLen(in []byte) int {
	if len(in) < 2 || in[0] != 0x1f || in[1] != 0x8b {
		return len(in)
	}
	zr, err := gzip.NewReader(bytes.NewReader(in))
	if err != nil {
		return 0
	}
	n, _ := io.Copy(io.Discard, io.LimitReader(zr, 64<<20))
	return int(n)
}

// FuzzReadIDX checks that no input panics the IDX reader, that memory it
// allocates stays within a constant plus a small multiple of the bytes the
// input actually delivers (whatever sizes the header declares), and that
// every accepted input re-encodes to itself.
func FuzzReadIDX(f *testing.F) {
	valid := idxBytes(8, []uint32{2, 3, 2}, seq(12))
	f.Add(valid)
	f.Add(gzipBytes(f, valid))
	f.Add(idxBytes(8, []uint32{5}, []byte{0, 1, 2, 3, 4}))
	f.Add(idxBytes(8, []uint32{0, 28, 28}, nil))
	f.Add([]byte{})
	f.Add([]byte{0, 0, 8, 0})
	f.Add([]byte{0x12, 0x34, 8, 1, 0, 0, 0, 1, 0})
	f.Add(idxBytes(0x0D, []uint32{1}, []byte{0, 0, 0, 0}))
	f.Add(idxBytes(8, []uint32{60000, 28, 28}, seq(100)))
	f.Add(idxBytes(8, []uint32{0xffffffff, 0xffffffff}, nil))
	f.Add(gzipBytes(f, idxBytes(8, []uint32{3, 1 << 29}, seq(50))))
	f.Add(append(append([]byte(nil), valid...), 9))
	gz := gzipBytes(f, valid)
	f.Add(gz[:len(gz)-5])
	f.Add(append(append([]byte(nil), gz...), gz...))

	f.Fuzz(func(t *testing.T, in []byte) {
		bound := uint64(decodedLen(in))
		var x *IDX
		var err error
		alloc := allocatedBy(func() { x, err = ReadIDX(bytes.NewReader(in)) })
		if limit := 1<<20 + 4*bound; alloc > limit {
			t.Fatalf("allocated %d bytes for an input of %d bytes (%d decoded); limit %d", alloc, len(in), bound, limit)
		}
		if err != nil {
			if x != nil {
				t.Fatalf("error %v with a non-nil result", err)
			}
			if !strings.HasPrefix(err.Error(), "datasets: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
			return
		}
		if len(x.Dims) == 0 || x.NumElements() != len(x.Data) {
			t.Fatalf("dims %v but %d data bytes", x.Dims, len(x.Data))
		}
		var re bytes.Buffer
		if err := WriteIDX(&re, x.Dims, x.Data); err != nil {
			t.Fatalf("re-encoding an accepted file: %v", err)
		}
		plain := in
		if len(in) >= 2 && in[0] == 0x1f && in[1] == 0x8b {
			zr, err := gzip.NewReader(bytes.NewReader(in))
			if err != nil {
				t.Fatalf("accepted input is not gzip: %v", err)
			}
			if plain, err = io.ReadAll(zr); err != nil {
				t.Fatalf("accepted input does not decompress: %v", err)
			}
		}
		if !bytes.Equal(re.Bytes(), plain) {
			t.Fatalf("accepted %x but it re-encodes to %x", plain, re.Bytes())
		}
	})
}
