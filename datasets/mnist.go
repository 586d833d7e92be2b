package datasets

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// MNISTClasses is the number of classes of MNIST, Fashion-MNIST and KMNIST.
const MNISTClasses = 10

// The standard MNIST file names, without the optional .gz.
const (
	MNISTTrainImages = "train-images-idx3-ubyte"
	MNISTTrainLabels = "train-labels-idx1-ubyte"
	MNISTTestImages  = "t10k-images-idx3-ubyte"
	MNISTTestLabels  = "t10k-labels-idx1-ubyte"
)

// mnistFiles are the four files of an MNIST-style directory.
var mnistFiles = [...]string{MNISTTrainImages, MNISTTrainLabels, MNISTTestImages, MNISTTestLabels}

// LoadMNIST loads the train and test sets of an MNIST-style directory: the
// four standard files (MNISTTrainImages and the rest), each gzipped (.gz)
// or not, with labels below MNISTClasses — MNIST, Fashion-MNIST and KMNIST
// all ship so. dir "" means the real MNIST bundled in the GoMNIST module,
// found by BundledMNISTDir (which may run the go command under ctx).
func LoadMNIST(ctx context.Context, dir string) (train, test *Dataset, err error) {
	if dir == "" {
		if dir, err = BundledMNISTDir(ctx); err != nil {
			return nil, nil, err
		}
	}
	paths := make(map[string]string, 4)
	for _, base := range mnistFiles {
		if paths[base], err = findIDXFile(dir, base); err != nil {
			return nil, nil, err
		}
	}
	if train, err = LoadIDXDataset(paths[MNISTTrainImages], paths[MNISTTrainLabels], MNISTClasses); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if test, err = LoadIDXDataset(paths[MNISTTestImages], paths[MNISTTestLabels], MNISTClasses); err != nil {
		return nil, nil, err
	}
	if train.Rows() != test.Rows() || train.Cols() != test.Cols() {
		return nil, nil, fmt.Errorf("datasets: %s: train images are %d×%d but test images %d×%d",
			dir, train.Rows(), train.Cols(), test.Rows(), test.Cols())
	}
	return train, test, nil
}

// LoadIDXDataset reads an images IDX file ([N rows cols]) and a labels IDX
// file ([N]), each gzipped or not, into a Dataset with the given classes.
func LoadIDXDataset(imagesPath, labelsPath string, classes int) (*Dataset, error) {
	images, err := ReadIDXFile(imagesPath)
	if err != nil {
		return nil, err
	}
	labels, err := ReadIDXFile(labelsPath)
	if err != nil {
		return nil, err
	}
	d, err := NewDatasetFromIDX(images, labels, classes)
	if err != nil {
		return nil, fmt.Errorf("%w (files %s and %s)", err, imagesPath, labelsPath)
	}
	return d, nil
}

// findIDXFile returns the path in dir of the IDX file base: base.gz, base,
// or the variants with ".idx" for "-idx" some mirrors use.
func findIDXFile(dir, base string) (string, error) {
	dotted := strings.Replace(base, "-idx", ".idx", 1)
	tried := []string{base + ".gz", base, dotted + ".gz", dotted}
	for i, name := range tried {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
		tried[i] = p
	}
	return "", fmt.Errorf("datasets: MNIST file %s not found in %s (tried %s)", base, dir, strings.Join(tried, ", "))
}
