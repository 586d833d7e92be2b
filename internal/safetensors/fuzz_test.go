package safetensors

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzRead checks that no input panics the reader, that Parse and Read
// agree, that an accepted file's tensors tile its data section, and that
// re-encoding an accepted file and parsing it again gives the same tensors
// and metadata (and is stable under a second round).
func FuzzRead(f *testing.F) {
	tensors, meta := sample(f)
	valid, err := Marshal(tensors, meta)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(file(`{}`, nil))
	f.Add(file(`{"__metadata__":{"a":"b"}}`, nil))
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(file(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)))
	f.Add(binary.LittleEndian.AppendUint64(nil, MaxHeaderSize))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		p, perr := Parse(in)
		r, rerr := Read(bytes.NewReader(in))
		if (perr == nil) != (rerr == nil) {
			t.Fatalf("Parse error %v, Read error %v", perr, rerr)
		}
		if perr != nil {
			if perr.Error() != rerr.Error() {
				t.Fatalf("Parse error %q, Read error %q", perr, rerr)
			}
			return
		}
		same(t, p, r)
		total := 0
		for _, x := range p.Tensors {
			total += len(x.Data)
		}
		if total != len(p.DataSection()) {
			t.Fatalf("tensors hold %d bytes, data section %d", total, len(p.DataSection()))
		}
		out, err := Marshal(p.Tensors, p.Metadata)
		if err != nil {
			t.Fatalf("re-encoding an accepted file: %v", err)
		}
		q, err := Parse(out)
		if err != nil {
			t.Fatalf("parsing a re-encoded file: %v", err)
		}
		same(t, p, q)
		out2, err := Marshal(q.Tensors, q.Metadata)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("second re-encoding differs (err %v)", err)
		}
	})
}

func same(t *testing.T, a, b *File) {
	t.Helper()
	if len(a.Metadata) != len(b.Metadata) {
		t.Fatalf("metadata %v vs %v", a.Metadata, b.Metadata)
	}
	for k, v := range a.Metadata {
		if b.Metadata[k] != v {
			t.Fatalf("metadata %q: %q vs %q", k, v, b.Metadata[k])
		}
	}
	if len(a.Tensors) != len(b.Tensors) {
		t.Fatalf("%d tensors vs %d", len(a.Tensors), len(b.Tensors))
	}
	for _, x := range a.Tensors {
		y, ok := b.Tensor(x.Name)
		if !ok {
			t.Fatalf("tensor %q missing", x.Name)
		}
		if x.DType != y.DType || !bytes.Equal(x.Data, y.Data) || len(x.Shape) != len(y.Shape) {
			t.Fatalf("tensor %q differs", x.Name)
		}
		for i := range x.Shape {
			if x.Shape[i] != y.Shape[i] {
				t.Fatalf("tensor %q shape %v vs %v", x.Name, x.Shape, y.Shape)
			}
		}
	}
}

// FuzzReadLimits reads under small limits: no input panics, Parse and Read
// agree, and every accepted file is within the limits (so none was
// skipped by the scan), while the same input under DefaultLimits is
// accepted too whenever it is under the small ones.
func FuzzReadLimits(f *testing.F) {
	lim := Limits{HeaderBytes: 512, Tensors: 3, NameBytes: 8, Dims: 3, MetadataEntries: 2}
	f.Add(file(`{"a":{"dtype":"U8","shape":[1,1,1],"data_offsets":[0,1]}}`, []byte{1}))
	f.Add(file(`{"a":{"dtype":"U8","shape":[1,1,1,1],"data_offsets":[0,1]}}`, []byte{1}))
	f.Add(file(string(manyTensors(3, 8)), nil))
	f.Add(file(string(manyTensors(4, 2)), nil))
	f.Add(file(string(manyTensors(1, 9)), nil))
	f.Add(file(`{"__metadata__":{"a":"","b":""}}`, nil))
	f.Add(file(`{"__metadata__":{"a":"","b":"","c":""}}`, nil))
	f.Add(file(`{"__metadata__":{"123456789":""}}`, nil))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, perr := ParseLimits(in, lim)
		_, rerr := ReadLimits(bytes.NewReader(in), lim)
		if (perr == nil) != (rerr == nil) || (perr != nil && perr.Error() != rerr.Error()) {
			t.Fatalf("Parse error %v, Read error %v", perr, rerr)
		}
		if perr != nil {
			return
		}
		if len(in)-8-len(p.DataSection()) > lim.HeaderBytes || len(p.Tensors) > lim.Tensors || len(p.Metadata) > lim.MetadataEntries {
			t.Fatalf("accepted beyond the limits: %d tensors, %d metadata entries", len(p.Tensors), len(p.Metadata))
		}
		for _, x := range p.Tensors {
			if len(x.Name) > lim.NameBytes || len(x.Shape) > lim.Dims {
				t.Fatalf("accepted tensor %q of %d dims beyond the limits", x.Name, len(x.Shape))
			}
		}
		for k := range p.Metadata {
			if len(k) > lim.NameBytes {
				t.Fatalf("accepted metadata key %q beyond the limits", k)
			}
		}
		if _, err := Parse(in); err != nil {
			t.Fatalf("accepted under small limits but not under the defaults: %v", err)
		}
	})
}
