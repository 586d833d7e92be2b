package models

import (
	"fmt"

	"gorgonia.org/tensor"
)

// Argmax returns, for each row of a float32 or float64 logits matrix
// (batch × classes), the index of its largest element (the first one on
// ties; NaN never wins unless it is the first element).
func Argmax(logits tensor.Tensor) ([]int, error) {
	if logits == nil {
		return nil, fmt.Errorf("models: Argmax: nil logits")
	}
	switch logits.Dtype() {
	case tensor.Float64:
		return argmax[float64](logits)
	case tensor.Float32:
		return argmax[float32](logits)
	default:
		return nil, fmt.Errorf("models: Argmax: unsupported dtype %v (want float32 or float64)", logits.Dtype())
	}
}

func argmax[T float](logits tensor.Tensor) ([]int, error) {
	d, s, err := matrixData[T](logits)
	if err != nil {
		return nil, fmt.Errorf("models: Argmax: %w", err)
	}
	rows, cols := s[0], s[1]
	out := make([]int, rows)
	if cols == 0 {
		return out, nil
	}
	for r := range out {
		row := d[r*cols : (r+1)*cols]
		best := 0
		for j, v := range row[1:] {
			if v > row[best] {
				best = j + 1
			}
		}
		out[r] = best
	}
	return out, nil
}

// CountCorrect returns how many rows of logits (batch × classes, float32 or
// float64) have their argmax equal to the label; len(labels) must be the
// batch size.
func CountCorrect(logits tensor.Tensor, labels []uint8) (int, error) {
	pred, err := Argmax(logits)
	if err != nil {
		return 0, fmt.Errorf("models: CountCorrect: %w", err)
	}
	if len(pred) != len(labels) {
		return 0, fmt.Errorf("models: CountCorrect: %d logit rows, %d labels", len(pred), len(labels))
	}
	n := 0
	for i, p := range pred {
		if p == int(labels[i]) {
			n++
		}
	}
	return n, nil
}

// FillOneHot overwrites dst (batch × classes, float32 or float64, contiguous)
// with the one-hot encoding of labels: dst[i, labels[i]] = 1, all else 0.
// It allocates nothing, so a trainer can refill the labels tensor bound to
// its one-hot node every step.
func FillOneHot(dst tensor.Tensor, labels []uint8) error {
	if dst == nil {
		return fmt.Errorf("models: FillOneHot: nil tensor")
	}
	s := dst.Shape()
	if s.Dims() != 2 || s[0] != len(labels) {
		return fmt.Errorf("models: FillOneHot: shape %v, want (%d, classes)", s, len(labels))
	}
	if dst.RequiresIterator() {
		return fmt.Errorf("models: FillOneHot: dst must be contiguous")
	}
	cols := s[1]
	for i, l := range labels {
		if int(l) >= cols {
			return fmt.Errorf("models: FillOneHot: label %d at %d out of range [0,%d)", l, i, cols)
		}
	}
	switch d := dst.Data().(type) {
	case []float64:
		fillOneHot(d, labels, cols)
	case []float32:
		fillOneHot(d, labels, cols)
	default:
		return fmt.Errorf("models: FillOneHot: unsupported dtype %v (want float32 or float64)", dst.Dtype())
	}
	return nil
}

func fillOneHot[T float](d []T, labels []uint8, cols int) {
	clear(d[:len(labels)*cols])
	for i, l := range labels {
		d[i*cols+int(l)] = 1
	}
}
