package tcp

import (
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
)

// read is one read from the socket. It makes non-blocking read(2) calls
// (the runtime keeps sockets non-blocking) while the link is hot, and on
// EAGAIN alternately calls runtime.Gosched, so that the other goroutines
// of this process (the receiver this reader just handed data, among them)
// run on this P, and sched_yield(2), so that another process on this core
// (a peer rank, say) runs. Cold, it parks in the network poller, where the
// read deadline applies.
func (r *sockReader) read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p := r.p
	rc, err := p.nc.SyscallConn()
	if err != nil {
		return p.nc.Read(b)
	}
	n, rerr := 0, error(nil)
	err = rc.Read(func(fd uintptr) bool {
		p.parked.Store(false)
		for i := 0; ; i++ {
			m, e := syscall.Read(int(fd), b)
			switch e {
			case nil:
				n = m
				if m == 0 {
					rerr = io.EOF
				}
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
			default:
				rerr = os.NewSyscallError("read", e)
				return true
			}
			if !p.hot() {
				p.parked.Store(true)
				if !p.hot() {
					return false // park until readable or kicked
				}
				p.parked.Store(false)
			}
			if i%2 == 0 {
				runtime.Gosched()
			} else {
				_, _, _ = syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			}
		}
	})
	p.parked.Store(false)
	if err == nil {
		err = rerr
	}
	if err != nil && err != io.EOF {
		err = &net.OpError{Op: "read", Net: "tcp", Source: p.nc.LocalAddr(), Addr: p.nc.RemoteAddr(), Err: err}
	}
	return n, err
}
