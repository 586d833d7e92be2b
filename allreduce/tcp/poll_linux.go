package tcp

import (
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"unsafe"
)

// readFile duplicates nc's descriptor for the reader (see poller.file).
func readFile(nc *net.TCPConn) *os.File {
	f, err := nc.File() // non-blocking, in the runtime's network poller
	if err != nil {
		return nil
	}
	return f
}

// read is one read from the socket; errors are bare (Read wraps them). It
// makes non-blocking read(2) calls (the descriptor is non-blocking) while
// the link is hot, and on EAGAIN alternately calls runtime.Gosched, so
// that the other goroutines of this process (the receiver this reader
// just handed data, among them) run on this P, and sched_yield(2), so that
// another process on this core (a peer rank, say) runs. Cold, it parks in
// the network poller, where the read deadline applies.
func (r *sockReader) read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p := r.p
	if p.file == nil {
		return p.nc.Read(b)
	}
	// A fresh RawConn each time: the compiler then sees its type and keeps
	// it and the closure on the stack (a stored interface would make both
	// escape: two allocations per read).
	rc, err := p.file.SyscallConn()
	if err != nil {
		return 0, err
	}
	n, rerr := 0, error(nil)
	err = rc.Read(func(fd uintptr) bool {
		p.parked.Store(false)
		for i := 0; ; i++ {
			m, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafePointer(b)), uintptr(len(b)))
			switch e {
			case 0:
				n = int(m)
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
	return n, err
}

// unsafePointer is the address of b's first byte (b is not empty).
func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
