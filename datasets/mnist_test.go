package datasets

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bundledDir finds the real MNIST or skips the test (no module, no network).
func bundledDir(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := BundledMNISTDir(ctx)
	if err != nil {
		t.Skipf("bundled MNIST not available: %v", err)
	}
	return dir
}

func TestLoadMNISTReal(t *testing.T) {
	dir := bundledDir(t)
	t.Logf("bundled MNIST at %s", dir)
	if raceEnabled {
		// The race detector makes inflating the 47 MB training images
		// slow; check the test set and the training labels, which are
		// small.
		test, err := LoadIDXDataset(filepath.Join(dir, MNISTTestImages+".gz"), filepath.Join(dir, MNISTTestLabels+".gz"), MNISTClasses)
		require.NoError(t, err)
		checkMNISTTest(t, test)
		labels, err := ReadIDXFile(filepath.Join(dir, MNISTTrainLabels+".gz"))
		require.NoError(t, err)
		assert.Equal(t, []int{60000}, labels.Dims)
		return
	}
	train, test, err := LoadMNIST(context.Background(), "")
	require.NoError(t, err)
	checkMNISTTest(t, test)

	assert.Equal(t, 60000, train.Len())
	assert.Equal(t, 28, train.Rows())
	assert.Equal(t, 28, train.Cols())
	assert.Equal(t, 784, train.Features())
	assert.Equal(t, 10, train.Classes())
	// The well-known MNIST class counts.
	assert.Equal(t, []int{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949}, train.LabelCounts())

	// The normalisation constants come from this data: the training pixel
	// mean, scaled to [0,1], is 0.1307.
	sum := 0
	for _, p := range train.images {
		sum += int(p)
	}
	assert.InDelta(t, MNISTMean, float64(sum)/255/float64(len(train.images)), 1e-4)

	// A batch of real data: the normalised background is -mean/std.
	x := make([]float32, 2*784)
	y := make([]float32, 2*10)
	require.NoError(t, train.FillBatch([]int{0, 59999}, x, y))
	assert.InDelta(t, -MNISTMean/MNISTStd, x[0], 1e-6)
	assert.Equal(t, float32(1), y[train.Label(0)])
	assert.Equal(t, float32(1), y[10+train.Label(59999)])
	assert.Equal(t, 5, train.Label(0)) // MNIST's first training digit is a 5
}

// checkMNISTTest checks the shape and class counts of the MNIST test set.
func checkMNISTTest(t *testing.T, test *Dataset) {
	t.Helper()
	assert.Equal(t, 10000, test.Len())
	assert.Equal(t, 28, test.Rows())
	assert.Equal(t, 28, test.Cols())
	assert.Equal(t, 784, test.Features())
	assert.Equal(t, 10, test.Classes())
	assert.Equal(t, []int{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009}, test.LabelCounts())
	assert.Equal(t, 7, test.Label(0)) // MNIST's first test digit is a 7
}

// writeIDXFile writes an IDX file, gzipped if name ends in .gz.
func writeIDXFile(t *testing.T, path string, dims []int, data []byte) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	if strings.HasSuffix(path, ".gz") {
		var plain strings.Builder
		require.NoError(t, WriteIDX(&plain, dims, data))
		_, err = f.Write(gzipBytes(t, []byte(plain.String())))
		require.NoError(t, err)
		return
	}
	require.NoError(t, WriteIDX(f, dims, data))
}

// fakeMNISTDir writes a small MNIST-style directory of 4×3 images, mixing
// gzipped, plain and dotted file names.
func fakeMNISTDir(t *testing.T) string {
	dir := t.TempDir()
	writeIDXFile(t, filepath.Join(dir, "train-images-idx3-ubyte.gz"), []int{5, 4, 3}, seq(60))
	writeIDXFile(t, filepath.Join(dir, "train-labels-idx1-ubyte"), []int{5}, []byte{0, 1, 2, 9, 9})
	writeIDXFile(t, filepath.Join(dir, "t10k-images.idx3-ubyte"), []int{2, 4, 3}, seq(24))
	writeIDXFile(t, filepath.Join(dir, "t10k-labels.idx1-ubyte.gz"), []int{2}, []byte{3, 4})
	return dir
}

func TestLoadMNISTDir(t *testing.T) {
	dir := fakeMNISTDir(t)
	train, test, err := LoadMNIST(context.Background(), dir)
	require.NoError(t, err)
	assert.Equal(t, 5, train.Len())
	assert.Equal(t, 2, test.Len())
	assert.Equal(t, 4, train.Rows())
	assert.Equal(t, 3, train.Cols())
	assert.Equal(t, []int{1, 1, 1, 0, 0, 0, 0, 0, 0, 2}, train.LabelCounts())
	assert.Equal(t, seq(24)[12:], test.Image(1))
}

func TestLoadMNISTErrors(t *testing.T) {
	ctx := context.Background()

	dir := fakeMNISTDir(t)
	require.NoError(t, os.Remove(filepath.Join(dir, "t10k-labels.idx1-ubyte.gz")))
	_, _, err := LoadMNIST(ctx, dir)
	assert.ErrorContains(t, err, "MNIST file t10k-labels-idx1-ubyte not found in "+dir)
	assert.ErrorContains(t, err, filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"))

	dir = fakeMNISTDir(t)
	labels := filepath.Join(dir, "train-labels-idx1-ubyte")
	writeIDXFile(t, labels, []int{5}, []byte{0, 1, 10, 2, 3})
	_, _, err = LoadMNIST(ctx, dir)
	assert.ErrorContains(t, err, "label 10 of example 2 is not below the 10 classes")
	assert.ErrorContains(t, err, labels)

	dir = fakeMNISTDir(t)
	labels = filepath.Join(dir, "train-labels-idx1-ubyte")
	writeIDXFile(t, labels, []int{4}, []byte{0, 1, 2, 3})
	_, _, err = LoadMNIST(ctx, dir)
	assert.ErrorContains(t, err, "5 images but 4 labels")

	dir = fakeMNISTDir(t)
	images := filepath.Join(dir, "t10k-images.idx3-ubyte")
	writeIDXFile(t, images, []int{2, 3, 4}, seq(24))
	_, _, err = LoadMNIST(ctx, dir)
	assert.ErrorContains(t, err, "train images are 4×3 but test images 3×4")

	dir = fakeMNISTDir(t)
	images = filepath.Join(dir, "t10k-images.idx3-ubyte")
	require.NoError(t, os.WriteFile(images, []byte{0, 0, 8, 3, 0, 0}, 0o644))
	_, _, err = LoadMNIST(ctx, dir)
	assert.ErrorIs(t, err, ErrIDXTruncated)
	assert.ErrorContains(t, err, images)

	_, _, err = LoadMNIST(ctx, filepath.Join(dir, "nope"))
	assert.ErrorContains(t, err, "not found in "+filepath.Join(dir, "nope"))
}
