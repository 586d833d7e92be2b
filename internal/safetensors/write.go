package safetensors

// Writing: the deterministic layout (order) and header, and the encoders
// Write and Marshal.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
)

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
func header(tensors []Tensor, metadata map[string]string, lim Limits) ([]byte, error) {
	if err := lim.checkCounts(tensors, metadata); err != nil {
		return nil, err
	}
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
	if b.Len() > lim.HeaderBytes {
		return nil, fmt.Errorf("safetensors: header of %d bytes exceeds the limit of %d", b.Len(), lim.HeaderBytes)
	}
	return b.Bytes(), nil
}

// Write writes tensors and metadata to w in the safetensors format (see the
// package documentation for the deterministic layout). It validates every
// tensor (known dtype, data length matching the shape, unique names) before
// writing anything.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	ordered := order(tensors)
	h, err := header(ordered, metadata, DefaultLimits())
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
