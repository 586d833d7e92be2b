package safetensors

import "fmt"

// Limits bound what a reader accepts, so that a hostile file is refused
// after reading at most its first Limits.HeaderBytes+8 bytes, in time and
// memory proportional to the limits rather than to what it declares.
// Every limit is checked while the header's JSON is scanned (walk), so a
// header that exceeds one is refused at the entry that does, before the
// rest is decoded.
type Limits struct {
	HeaderBytes     int // the header's length
	Tensors         int // tensor entries
	NameBytes       int // a tensor's name, a metadata key
	Dims            int // dimensions of one shape
	MetadataEntries int // keys of __metadata__
}

// DefaultLimits are the limits Parse, Read and ReadFile apply, generous
// for real files (a model shard with thousands of tensors has a header of
// a few MiB; names of a few hundred bytes; at most 8 dimensions) and small
// enough that the largest header they admit parses in well under a second
// (docs/checkpoints.md gives the measurement):
//
//	HeaderBytes 16 MiB, Tensors 65536, NameBytes 1024, Dims 32,
//	MetadataEntries 4096.
//
// The format's own upper bound, MaxHeaderSize (100 MiB), is the most
// HeaderBytes may be.
func DefaultLimits() Limits {
	return Limits{HeaderBytes: 16 << 20, Tensors: 1 << 16, NameBytes: 1024, Dims: 32, MetadataEntries: 4096}
}

// check validates the limits themselves.
func (l Limits) check() error {
	switch {
	case l.HeaderBytes < 2 || l.HeaderBytes > MaxHeaderSize:
		return fmt.Errorf("safetensors: limit on header bytes %d: want 2..%d", l.HeaderBytes, MaxHeaderSize)
	case l.Tensors < 0 || l.NameBytes < 1 || l.Dims < 0 || l.MetadataEntries < 0:
		return fmt.Errorf("safetensors: limits %+v: want tensors, dims and metadata entries >= 0, name bytes >= 1", l)
	}
	return nil
}

// CheckWrite reports the first of l the file of tensors and metadata
// would exceed, header length included: a writer that checks it never
// writes what a reader with l refuses. Write checks DefaultLimits.
func (l Limits) CheckWrite(tensors []Tensor, metadata map[string]string) error {
	if err := l.checkCounts(tensors, metadata); err != nil {
		return err
	}
	_, err := header(order(tensors), metadata, l)
	return err
}

// checkCounts is CheckWrite without the header's length.
func (l Limits) checkCounts(tensors []Tensor, metadata map[string]string) error {
	if len(tensors) > l.Tensors {
		return fmt.Errorf("safetensors: %d tensors exceed the limit of %d", len(tensors), l.Tensors)
	}
	if len(metadata) > l.MetadataEntries {
		return fmt.Errorf("safetensors: %d metadata entries exceed the limit of %d", len(metadata), l.MetadataEntries)
	}
	for _, t := range tensors {
		switch {
		case len(t.Name) > l.NameBytes:
			return fmt.Errorf("safetensors: tensor name of %d bytes exceeds the limit of %d", len(t.Name), l.NameBytes)
		case len(t.Shape) > l.Dims:
			return fmt.Errorf("safetensors: tensor %q has %d dimensions, over the limit of %d", t.Name, len(t.Shape), l.Dims)
		}
	}
	for k := range metadata {
		if len(k) > l.NameBytes {
			return fmt.Errorf("safetensors: metadata key of %d bytes exceeds the limit of %d", len(k), l.NameBytes)
		}
	}
	return nil
}
