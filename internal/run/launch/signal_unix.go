//go:build unix

package launch

import (
	"os"
	"syscall"
)

// signalProc sends s to p's process group (the rank and anything it
// started), or to p alone if that fails.
func signalProc(p *os.Process, s os.Signal) {
	if sig, ok := s.(syscall.Signal); ok {
		if syscall.Kill(-p.Pid, sig) == nil {
			return
		}
	}
	_ = p.Signal(s)
}
