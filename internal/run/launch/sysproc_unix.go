//go:build unix && !linux

package launch

import "syscall"

// sysProcAttr starts a rank in its own process group: the terminal's
// Ctrl-C reaches it only as forwarded by the launcher, once.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
