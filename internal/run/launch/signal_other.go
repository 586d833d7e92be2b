//go:build !unix

package launch

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalProc: only killing is portable.
func signalProc(p *os.Process, s os.Signal) {
	if s == os.Interrupt || p.Signal(s) != nil {
		_ = p.Kill()
	}
}
