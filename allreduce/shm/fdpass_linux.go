//go:build linux

package shm

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// sendFD passes fd to the peer: one byte 'F' carrying SCM_RIGHTS.
func sendFD(uc *net.UnixConn, fd int) error {
	_, _, err := uc.WriteMsgUnix([]byte{'F'}, unix.UnixRights(fd), nil)
	return err
}

// recvFD receives the descriptor sendFD passed. Anything else (no
// descriptor, several, a truncated control message, another byte) is a
// protocol error, and every descriptor that came is closed. The runtime
// receives with MSG_CMSG_CLOEXEC, so no descriptor leaks into children.
func recvFD(uc *net.UnixConn, peer int) (int, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(b[:], oob)
	var fds []int
	if oobn > 0 {
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for i := range msgs {
				if got, rerr := unix.ParseUnixRights(&msgs[i]); rerr == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	bad := func(e error) (int, error) {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		return -1, e
	}
	switch {
	case err != nil:
		return bad(fmt.Errorf("receiving rank %d's file: %w", peer, err))
	case n != 1 || b[0] != 'F' || flags&unix.MSG_CTRUNC != 0 || len(fds) != 1:
		return bad(fmt.Errorf("%w: rank %d passed %d descriptor(s) with %d byte(s) %q (flags %#x), want one file", ErrProtocol, peer, len(fds), n, b[:n], flags))
	}
	return fds[0], nil
}

// peerPID is the process at the other end of uc (SO_PEERCRED), or 0.
func peerPID(uc *net.UnixConn) int {
	pid, _ := peerCred(uc)
	return pid
}

// peerCred is the process and user at the other end of uc (SO_PEERCRED),
// or 0 and -1.
func peerCred(uc *net.UnixConn) (pid, uid int) {
	uid = -1
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, uid
	}
	_ = rc.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid, uid = int(cred.Pid), int(cred.Uid)
		}
	})
	return pid, uid
}
