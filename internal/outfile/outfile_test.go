//go:build unix

package outfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// withUmask runs the test under umask mask (process-wide: these tests do
// not run in parallel).
func withUmask(t *testing.T, mask int) {
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// A symbolic link planted at the target (pointing at a file of "another
// user") is replaced by the new file; the file it pointed to keeps its
// bytes.
func TestWriteReplacesSymlinkNotFollowing(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("precious"), 0o644))
	target := filepath.Join(dir, "out.json")
	require.NoError(t, os.Symlink(victim, target))

	require.NoError(t, Write(target, Shared, func(w io.Writer) error {
		_, err := io.WriteString(w, "new")
		return err
	}))
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, "precious", string(b))
	fi, err := os.Lstat(target)
	require.NoError(t, err)
	require.True(t, fi.Mode().IsRegular(), "the link was not replaced: %v", fi.Mode())
	b, err = os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "new", string(b))
}

// A dangling link (the classic /tmp attack: the link names a file the
// attacker wants created) is replaced too, and nothing is created at its
// destination.
func TestCreateDanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "created-by-victim")
	target := filepath.Join(dir, "cpu.pprof")
	require.NoError(t, os.Symlink(dest, target))
	f, err := Create(target, Shared)
	require.NoError(t, err)
	_, err = f.WriteString("profile")
	require.NoError(t, err)
	require.NoError(t, f.Commit())
	_, err = os.Lstat(dest)
	require.True(t, errors.Is(err, os.ErrNotExist), "the link's destination was created: %v", err)
	fi, err := os.Lstat(target)
	require.NoError(t, err)
	require.True(t, fi.Mode().IsRegular())
}

func TestModesFollowUmask(t *testing.T) {
	for _, tc := range []struct {
		mask       int
		mode, want os.FileMode
	}{
		{0o022, Private, 0o600}, {0o022, Shared, 0o644}, {0o077, Shared, 0o600}, {0o002, Shared, 0o644},
	} {
		withUmask(t, tc.mask)
		path := filepath.Join(t.TempDir(), "f")
		require.NoError(t, Write(path, tc.mode, func(io.Writer) error { return nil }))
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Equal(t, tc.want, fi.Mode().Perm(), "umask %o mode %o", tc.mask, tc.mode)
	}
}

// On a write error and on Abort the target keeps its old bytes and no
// temporary file is left.
func TestErrorsLeaveTargetAlone(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "metrics.csv")
	require.NoError(t, os.WriteFile(target, []byte("old"), 0o644))
	err := Write(target, Shared, func(w io.Writer) error { return errors.New("boom") })
	require.ErrorContains(t, err, "boom")
	require.ErrorContains(t, err, target)
	f, err := Create(target, Shared)
	require.NoError(t, err)
	f.Abort()
	f.Abort() // twice is fine
	require.Error(t, f.Commit())
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "old", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "temporary files left behind")
}

// A directory at the target is an error naming it, not a crash.
func TestDirectoryAtTarget(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "ck.safetensors")
	require.NoError(t, os.Mkdir(target, 0o755))
	err := Write(target, Private, func(io.Writer) error { return nil })
	require.ErrorContains(t, err, target)
}

func TestCheckWritable(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, CheckWritable(dir))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)

	missing := filepath.Join(dir, "nope")
	err = CheckWritable(missing)
	require.ErrorContains(t, err, missing)

	if os.Geteuid() == 0 {
		t.Log("root writes a read-only directory: only the missing-directory case runs")
		return
	}
	ro := filepath.Join(dir, "ro")
	require.NoError(t, os.Mkdir(ro, 0o555))
	err = CheckWritable(ro)
	require.ErrorContains(t, err, ro)
	require.True(t, strings.Contains(err.Error(), "not writable"), err.Error())
}
