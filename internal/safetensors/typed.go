package safetensors

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
)

// Element is a Go element type with a safetensors dtype.
type Element interface {
	float32 | float64 | int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64
}

// DTypeOf returns the dtype of E.
func DTypeOf[E Element]() DType {
	var z E
	switch any(z).(type) {
	case float32:
		return F32
	case float64:
		return F64
	case int8:
		return I8
	case int16:
		return I16
	case int32:
		return I32
	case int64:
		return I64
	case uint8:
		return U8
	case uint16:
		return U16
	case uint32:
		return U32
	default: // uint64
		return U64
	}
}

// New makes a tensor of dtype DTypeOf[E] holding values (encoded
// little-endian) with the given shape, whose element count must be
// len(values).
func New[E Element](name string, shape []int, values []E) (Tensor, error) {
	n, err := numElements(shape)
	if err != nil {
		return Tensor{}, fmt.Errorf("safetensors: tensor %q: %w", name, err)
	}
	if n != len(values) {
		return Tensor{}, fmt.Errorf("safetensors: tensor %q: shape %v has %d elements, got %d values", name, shape, n, len(values))
	}
	data, err := binary.Append(make([]byte, 0, len(values)*DTypeOf[E]().Size()), binary.LittleEndian, values)
	if err != nil {
		return Tensor{}, fmt.Errorf("safetensors: tensor %q: %w", name, err)
	}
	return Tensor{Name: name, DType: DTypeOf[E](), Shape: slices.Clone(shape), Data: data}, nil
}

// Values decodes t's data as E, which must be t's dtype (no conversion).
func Values[E Element](t Tensor) ([]E, error) {
	want := DTypeOf[E]()
	if t.DType != want {
		return nil, fmt.Errorf("safetensors: tensor %q is %s, want %s", t.Name, describe(t.DType), want)
	}
	if len(t.Data)%want.Size() != 0 {
		return nil, fmt.Errorf("safetensors: tensor %q: %d bytes is not a whole number of %s", t.Name, len(t.Data), want)
	}
	out := make([]E, len(t.Data)/want.Size())
	if err := binary.Read(bytes.NewReader(t.Data), binary.LittleEndian, out); err != nil {
		return nil, fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
	}
	return out, nil
}

// Float64s decodes an F32 or F64 tensor as float64 (exact for both).
func Float64s(t Tensor) ([]float64, error) {
	switch t.DType {
	case F64:
		return Values[float64](t)
	case F32:
		v, err := Values[float32](t)
		if err != nil {
			return nil, err
		}
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out, nil
	}
	return nil, fmt.Errorf("safetensors: tensor %q is %s, want F32 or F64", t.Name, describe(t.DType))
}
