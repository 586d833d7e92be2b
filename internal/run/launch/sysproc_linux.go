package launch

import "syscall"

// sysProcAttr starts a rank in its own process group (the terminal's
// Ctrl-C reaches it only as forwarded by the launcher, once) and has the
// kernel kill it if the launcher dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
