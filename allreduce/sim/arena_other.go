//go:build !linux && !darwin && !dragonfly && !freebsd && !netbsd && !openbsd

package sim

// mapArena falls back to ordinary memory where no PROT_NONE mapping is
// made: the transport still never touches it, but an accidental access by
// the caller does not fault.
func mapArena(n int) ([]byte, error) { return make([]byte, n), nil }

func unmapArena([]byte) error { return nil }
