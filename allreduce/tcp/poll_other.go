//go:build !linux

package tcp

import (
	"net"
	"os"
)

// readFile: polling is implemented on Linux only; the reader reads nc.
func readFile(*net.TCPConn) *os.File { return nil }

// read reads from the socket.
func (r *sockReader) read(b []byte) (int, error) { return r.p.nc.Read(b) }
