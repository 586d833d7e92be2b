//go:build !linux

package tcp

// read reads from the socket; polling is implemented on Linux only.
func (r *sockReader) read(b []byte) (int, error) { return r.p.nc.Read(b) }
