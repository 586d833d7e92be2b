package models

import (
	"fmt"
	"hash"
	"hash/fnv"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/ringddp/ringddp/graphlock"
	"github.com/ringddp/ringddp/numeric"
)

// CrossEntropy returns the scalar node
//
//	mean over rows r of  -Σ_j oneHot[r,j] · log_softmax(logits[r])_j
//
// for logits and oneHot of the same shape (batch × classes) and dtype
// (float32 or float64). It is one fused op: each row's maximum is subtracted
// before exponentiating, so it is exact for logits of any magnitude (gorgonia's
// SoftMax/LogSoftMax take the maximum from the tensor's first element and
// G.LogSumExp overflows). Its gradient with respect to logits is
// (softmax(logits)·Σ_j oneHot[r,j] − oneHot) / batch × upstream, which for
// one-hot (or any row-normalised) labels is the familiar (softmax − oneHot) /
// batch. No gradient flows to oneHot. Accumulation is in float64 for both
// dtypes.
func CrossEntropy(logits, oneHot *G.Node) (*G.Node, error) {
	if logits == nil || oneHot == nil {
		return nil, fmt.Errorf("models: CrossEntropy: nil node")
	}
	if err := checkCEShapes(logits.Shape(), oneHot.Shape()); err != nil {
		return nil, err
	}
	if logits.Dtype() != oneHot.Dtype() {
		return nil, fmt.Errorf("models: CrossEntropy: logits dtype %v, labels dtype %v", logits.Dtype(), oneHot.Dtype())
	}
	if err := checkDtype(logits.Dtype()); err != nil {
		return nil, err
	}
	var out *G.Node
	err := graphlock.Do(func() error {
		var err error
		out, err = G.ApplyOp(ceLossOp{}, logits, oneHot)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("models: CrossEntropy: %w", err)
	}
	return out, nil
}

func checkCEShapes(logits, labels tensor.Shape) error {
	if logits.Dims() != 2 {
		return fmt.Errorf("models: CrossEntropy: logits shape %v, want (batch, classes)", logits)
	}
	if !logits.Eq(labels) {
		return fmt.Errorf("models: CrossEntropy: logits shape %v, labels shape %v", logits, labels)
	}
	if logits[0] <= 0 || logits[1] <= 0 {
		return fmt.Errorf("models: CrossEntropy: empty logits shape %v", logits)
	}
	return nil
}

func opHash(op interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	op.WriteHash(h)
	return h.Sum32()
}

// matrixType is the hm type of a float matrix with element type a.
func matrixType(a hm.Type) hm.Type { return &G.TensorType{Dims: 2, Of: a} }

// ceLossOp: (logits, labels) → scalar mean cross-entropy.
type ceLossOp struct{}

var (
	_ G.Op   = ceLossOp{}
	_ G.SDOp = ceLossOp{}
)

func (ceLossOp) Arity() int { return 2 }

// Type: Matrix a → Matrix a → a.
func (ceLossOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(matrixType(a), matrixType(a), a)
}

func (ceLossOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("CrossEntropy: want 2 inputs, got %d", len(in))
	}
	a, ok1 := in[0].(tensor.Shape)
	b, ok2 := in[1].(tensor.Shape)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("CrossEntropy: inputs are not shapes")
	}
	if err := checkCEShapes(a, b); err != nil {
		return nil, err
	}
	return tensor.ScalarShape(), nil
}

func (op ceLossOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 2 {
		return nil, fmt.Errorf("CrossEntropy: want 2 inputs, got %d", len(vals))
	}
	switch vals[0].Dtype() {
	case tensor.Float64:
		z, y, rows, cols, err := ceInputs[float64](vals[0], vals[1])
		if err != nil {
			return nil, err
		}
		return G.NewF64(ceLoss(z, y, rows, cols)), nil
	case tensor.Float32:
		z, y, rows, cols, err := ceInputs[float32](vals[0], vals[1])
		if err != nil {
			return nil, err
		}
		return G.NewF32(float32(ceLoss(z, y, rows, cols))), nil
	default:
		return nil, fmt.Errorf("CrossEntropy: unsupported dtype %v", vals[0].Dtype())
	}
}

func (ceLossOp) ReturnsPtr() bool     { return false }
func (ceLossOp) CallsExtern() bool    { return false }
func (ceLossOp) OverwritesInput() int { return -1 }
func (ceLossOp) WriteHash(h hash.Hash) {
	_, _ = h.Write([]byte("ringddp.CrossEntropy"))
}
func (op ceLossOp) Hashcode() uint32 { return opHash(op) }
func (ceLossOp) String() string      { return "CrossEntropy" }

// DiffWRT: differentiable with respect to logits, not to the labels.
func (ceLossOp) DiffWRT(inputs int) []bool {
	d := make([]bool, inputs)
	if inputs > 0 {
		d[0] = true
	}
	return d
}

// SymDiff returns the gradient node for logits and nil for the labels
// (gorgonia's Backpropagate indexes one entry per child and skips the
// non-differentiable ones; nil is allowed there).
func (ceLossOp) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	if len(inputs) != 2 {
		return nil, fmt.Errorf("CrossEntropy.SymDiff: want 2 inputs, got %d", len(inputs))
	}
	dz, err := G.ApplyOp(ceGradOp{}, inputs[0], inputs[1], grad)
	if err != nil {
		return nil, fmt.Errorf("CrossEntropy.SymDiff: %w", err)
	}
	return G.Nodes{dz, nil}, nil
}

// ceGradOp: (logits, labels, upstream scalar) → d loss / d logits.
type ceGradOp struct{}

var _ G.Op = ceGradOp{}

func (ceGradOp) Arity() int { return 3 }

// Type: Matrix a → Matrix a → a → Matrix a.
func (ceGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(matrixType(a), matrixType(a), a, matrixType(a))
}

func (ceGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("CrossEntropyGrad: want 3 inputs, got %d", len(in))
	}
	a, ok1 := in[0].(tensor.Shape)
	b, ok2 := in[1].(tensor.Shape)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("CrossEntropyGrad: inputs are not shapes")
	}
	if err := checkCEShapes(a, b); err != nil {
		return nil, err
	}
	return a.Clone(), nil
}

func (ceGradOp) Do(vals ...G.Value) (G.Value, error) {
	if len(vals) != 3 {
		return nil, fmt.Errorf("CrossEntropyGrad: want 3 inputs, got %d", len(vals))
	}
	up, err := scalarOf(vals[2])
	if err != nil {
		return nil, fmt.Errorf("CrossEntropyGrad: upstream gradient: %w", err)
	}
	switch vals[0].Dtype() {
	case tensor.Float64:
		z, y, rows, cols, err := ceInputs[float64](vals[0], vals[1])
		if err != nil {
			return nil, err
		}
		out := make([]float64, rows*cols)
		ceGrad(out, z, y, rows, cols, up)
		return tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(out)), nil
	case tensor.Float32:
		z, y, rows, cols, err := ceInputs[float32](vals[0], vals[1])
		if err != nil {
			return nil, err
		}
		out := make([]float32, rows*cols)
		ceGrad(out, z, y, rows, cols, up)
		return tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(out)), nil
	default:
		return nil, fmt.Errorf("CrossEntropyGrad: unsupported dtype %v", vals[0].Dtype())
	}
}

func (ceGradOp) ReturnsPtr() bool     { return false }
func (ceGradOp) CallsExtern() bool    { return false }
func (ceGradOp) OverwritesInput() int { return -1 }
func (ceGradOp) WriteHash(h hash.Hash) {
	_, _ = h.Write([]byte("ringddp.CrossEntropyGrad"))
}
func (op ceGradOp) Hashcode() uint32 { return opHash(op) }
func (ceGradOp) String() string      { return "CrossEntropyGrad" }

// float is an element type of the models (numeric.Float).
type float = numeric.Float

// ceInputs returns the row-major data of logits and labels (contiguous copies
// where they are non-contiguous views) and the matrix geometry.
func ceInputs[T float](zv, yv G.Value) (z, y []T, rows, cols int, err error) {
	z, zs, err := matrixData[T](zv)
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("CrossEntropy: logits: %w", err)
	}
	y, ys, err := matrixData[T](yv)
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("CrossEntropy: labels: %w", err)
	}
	if err := checkCEShapes(zs, ys); err != nil {
		return nil, nil, 0, 0, err
	}
	return z, y, zs[0], zs[1], nil
}

// matrixData returns a 2-D float tensor's elements in row-major order.
func matrixData[T float](v G.Value) ([]T, tensor.Shape, error) {
	t, ok := v.(tensor.Tensor)
	if !ok {
		return nil, nil, fmt.Errorf("got %T, want a tensor", v)
	}
	s := t.Shape()
	if s.Dims() != 2 {
		return nil, nil, fmt.Errorf("shape %v, want a matrix", s)
	}
	if t.RequiresIterator() {
		view, ok := t.(tensor.View)
		if !ok {
			return nil, nil, fmt.Errorf("non-contiguous %T cannot be materialised", t)
		}
		t = view.Materialize()
	}
	d, ok := t.Data().([]T)
	if !ok {
		return nil, nil, fmt.Errorf("data is %T, want %T", t.Data(), []T(nil))
	}
	if len(d) < s.TotalSize() {
		return nil, nil, fmt.Errorf("data has %d elements, shape %v needs %d", len(d), s, s.TotalSize())
	}
	return d[:s.TotalSize()], s, nil
}

// scalarOf reads a scalar float value (a gorgonia Scalar or a 1-element tensor).
func scalarOf(v G.Value) (float64, error) {
	switch d := v.Data().(type) {
	case float64:
		return d, nil
	case float32:
		return float64(d), nil
	case []float64:
		if len(d) == 1 {
			return d[0], nil
		}
	case []float32:
		if len(d) == 1 {
			return float64(d[0]), nil
		}
	}
	return 0, fmt.Errorf("got %T with data %T, want a float scalar", v, v.Data())
}

// rowLogSumExp returns log Σ exp(row), stably: max + log Σ exp(row − max).
func rowLogSumExp[T float](row []T) (max, lse float64) {
	max = float64(row[0])
	for _, v := range row[1:] {
		if float64(v) > max {
			max = float64(v)
		}
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - max)
	}
	return max, max + math.Log(s)
}

// ceLoss is the mean over rows of −Σ_j y_j (z_j − lse(z)). Terms with
// y_j = 0 are skipped, so a −Inf logit with a zero label contributes 0, not NaN.
func ceLoss[T float](z, y []T, rows, cols int) float64 {
	var total float64
	for r := 0; r < rows; r++ {
		zr, yr := z[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols]
		_, lse := rowLogSumExp(zr)
		for j, yj := range yr {
			if yj != 0 {
				total -= float64(yj) * (float64(zr[j]) - lse)
			}
		}
	}
	return total / float64(rows)
}

// ceGrad writes d loss / d z = (softmax(z)·Σy − y) · up / rows into out.
func ceGrad[T float](out, z, y []T, rows, cols int, up float64) {
	scale := up / float64(rows)
	for r := 0; r < rows; r++ {
		zr, yr, or := z[r*cols:(r+1)*cols], y[r*cols:(r+1)*cols], out[r*cols:(r+1)*cols]
		_, lse := rowLogSumExp(zr)
		var sy float64
		for _, v := range yr {
			sy += float64(v)
		}
		for j := range or {
			p := math.Exp(float64(zr[j]) - lse)
			or[j] = T((p*sy - float64(yr[j])) * scale)
		}
	}
}
