package datasets

import (
	"fmt"
	"math"

	"github.com/ringddp/ringddp/internal/vecops"
)

// The MNIST training-set pixel mean and standard deviation (of pixels scaled
// to [0,1]), the usual normalisation; a Dataset applies them by default.
const (
	MNISTMean = 0.1307
	MNISTStd  = 0.3081
)

// Dataset is an in-memory image classification dataset: Len() images of
// Rows()×Cols() uint8 pixels and one uint8 label each, below Classes().
//
// A Dataset is immutable, so any number of goroutines (in-process ranks) may
// fill batches from one Dataset at once. Pixels come out as
// (p/255 - mean) / std; the default is the MNIST mean and std, and
// WithNormalization(0, 1) gives plain [0,1] pixels.
type Dataset struct {
	images              []uint8 // Len()*Rows()*Cols(), image-major, row-major
	labels              []uint8
	rows, cols, classes int
	mean, std           float64
	lut32               *[256]float32 // pixel value -> input value
	lut64               *[256]float64
}

// NewDataset makes a Dataset of len(labels) images from images (row-major,
// rows*cols bytes per image) and labels, which it keeps without copying:
// the caller must not modify them afterwards. It checks the sizes agree and
// that every label is below classes (1..256).
func NewDataset(images, labels []uint8, rows, cols, classes int) (*Dataset, error) {
	if rows < 1 || cols < 1 {
		return nil, fmt.Errorf("datasets: image size %d×%d, want at least 1×1", rows, cols)
	}
	if classes < 1 || classes > 256 {
		return nil, fmt.Errorf("datasets: %d classes, want 1..256 (labels are bytes)", classes)
	}
	feat := rows * cols
	if len(images)%feat != 0 || len(images)/feat != len(labels) {
		return nil, fmt.Errorf("datasets: %d image bytes hold %d images of %d×%d (remainder %d) but there are %d labels",
			len(images), len(images)/feat, rows, cols, len(images)%feat, len(labels))
	}
	for i, l := range labels {
		if int(l) >= classes {
			return nil, fmt.Errorf("datasets: label %d of example %d is not below the %d classes", l, i, classes)
		}
	}
	d := &Dataset{images: images, labels: labels, rows: rows, cols: cols, classes: classes}
	d.setNormalization(MNISTMean, MNISTStd)
	return d, nil
}

// NewDatasetFromIDX makes a Dataset from an images IDX of dimensions
// [N rows cols] and a labels IDX of dimensions [N], as in MNIST.
func NewDatasetFromIDX(images, labels *IDX, classes int) (*Dataset, error) {
	if len(images.Dims) != 3 {
		return nil, fmt.Errorf("datasets: images IDX has dimensions %v, want 3 (count, rows, cols)", images.Dims)
	}
	if len(labels.Dims) != 1 {
		return nil, fmt.Errorf("datasets: labels IDX has dimensions %v, want 1 (count)", labels.Dims)
	}
	if images.Dims[0] != labels.Dims[0] {
		return nil, fmt.Errorf("datasets: %d images but %d labels", images.Dims[0], labels.Dims[0])
	}
	return NewDataset(images.Data, labels.Data, images.Dims[1], images.Dims[2], classes)
}

// setNormalization builds the pixel lookup tables; only for a new Dataset.
func (d *Dataset) setNormalization(mean, std float64) {
	d.mean, d.std = mean, std
	d.lut32, d.lut64 = new([256]float32), new([256]float64)
	for p := range 256 {
		v := (float64(p)/255 - mean) / std
		d.lut64[p], d.lut32[p] = v, float32(v)
	}
}

// WithNormalization returns a Dataset sharing d's data whose pixels come out
// as (p/255 - mean) / std. It panics unless std is finite and positive and
// mean finite.
func (d *Dataset) WithNormalization(mean, std float64) *Dataset {
	if !(std > 0) || math.IsInf(std, 0) || math.IsNaN(mean) || math.IsInf(mean, 0) {
		panic(fmt.Sprintf("datasets: WithNormalization(%v, %v): want a finite mean and a finite std > 0", mean, std))
	}
	c := *d
	c.setNormalization(mean, std)
	return &c
}

// Normalization returns the mean and std applied to pixels scaled to [0,1].
func (d *Dataset) Normalization() (mean, std float64) { return d.mean, d.std }

// Len returns the number of examples.
func (d *Dataset) Len() int { return len(d.labels) }

// Rows returns the image height.
func (d *Dataset) Rows() int { return d.rows }

// Cols returns the image width.
func (d *Dataset) Cols() int { return d.cols }

// Features returns the values per image, Rows()*Cols() (784 for MNIST).
func (d *Dataset) Features() int { return d.rows * d.cols }

// Classes returns the number of classes (10 for MNIST).
func (d *Dataset) Classes() int { return d.classes }

// Image returns example i's raw pixels, row-major; the slice is shared and
// must not be modified.
func (d *Dataset) Image(i int) []uint8 {
	f := d.Features()
	return d.images[i*f : (i+1)*f : (i+1)*f]
}

// Label returns example i's label.
func (d *Dataset) Label(i int) int { return int(d.labels[i]) }

// LabelCounts returns how many examples each class has.
func (d *Dataset) LabelCounts() []int {
	counts := make([]int, d.classes)
	for _, l := range d.labels {
		counts[l]++
	}
	return counts
}

// Slice returns the examples [lo, hi) as a Dataset sharing d's memory and
// normalisation. It panics if the range is invalid, as slicing does.
func (d *Dataset) Slice(lo, hi int) *Dataset {
	if lo < 0 || hi < lo || hi > d.Len() {
		panic(fmt.Sprintf("datasets: Slice(%d, %d) of a Dataset of %d examples", lo, hi, d.Len()))
	}
	f := d.Features()
	c := *d
	c.images = d.images[lo*f : hi*f : hi*f]
	c.labels = d.labels[lo:hi:hi]
	return &c
}

// FillBatch writes the examples indices name into a caller-provided batch:
// x (len(indices)*Features(), row b = example indices[b]) gets the
// normalised pixels and yOneHot (len(indices)*Classes()) the one-hot labels.
// Either may be nil to skip it. It allocates nothing and, on an error (a
// wrong length or an index out of range), writes nothing.
func (d *Dataset) FillBatch(indices []int, x, yOneHot []float32) error {
	return fillBatch(d, d.lut32, indices, x, yOneHot)
}

// FillBatch64 is FillBatch for float64 batches.
func (d *Dataset) FillBatch64(indices []int, x, yOneHot []float64) error {
	return fillBatch(d, d.lut64, indices, x, yOneHot)
}

func fillBatch[T float32 | float64](d *Dataset, lut *[256]T, indices []int, x, y []T) error {
	f, c, n := d.Features(), d.classes, d.Len()
	if x != nil && len(x) != len(indices)*f {
		return fmt.Errorf("datasets: FillBatch: x has %d values, want %d (%d examples × %d features)",
			len(x), len(indices)*f, len(indices), f)
	}
	if y != nil && len(y) != len(indices)*c {
		return fmt.Errorf("datasets: FillBatch: yOneHot has %d values, want %d (%d examples × %d classes)",
			len(y), len(indices)*c, len(indices), c)
	}
	for b, i := range indices {
		if i < 0 || i >= n {
			return fmt.Errorf("datasets: FillBatch: indices[%d] = %d is out of range [0, %d)", b, i, n)
		}
	}
	v, err := vecops.Best()
	if err != nil {
		return err
	}
	for b, i := range indices {
		if x != nil {
			vecops.LUT(v, x[b*f:(b+1)*f], d.images[i*f:(i+1)*f], lut)
		}
		if y != nil {
			row := y[b*c : (b+1)*c]
			clear(row)
			row[d.labels[i]] = 1
		}
	}
	return nil
}
