package launch

import (
	"bytes"
	"os"
	"strconv"
)

// procState is a process's scheduling state from /proc/<pid>/stat: 'R'
// running, 'S' sleeping, 'T' stopped (SIGSTOP), 't' stopped by a tracer,
// 'Z' a zombie, ...; 0 when unknown.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
