package main

import (
	"os"
	"path/filepath"
	"testing"
)

// -cpuprofile replaces a symbolic link planted at its path instead of
// writing through it.
func TestCPUProfileReplacesSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cpu.pprof")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	stop, err := startCPUProfile(&config{cpuprof: path})
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Fatalf("the link's target was written: %q, %v", b, err)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		t.Fatalf("%s: %v, %v", path, fi, err)
	}
}
