//go:build linux

package sim

import "syscall"

// mapArena reserves n bytes of address space that faults on any access.
func mapArena(n int) ([]byte, error) {
	return syscall.Mmap(-1, 0, n, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
}

func unmapArena(m []byte) error { return syscall.Munmap(m) }
