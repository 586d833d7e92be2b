//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// region is one rank's shared file mapped into this process: this rank's
// own (created here) or a peer's (received over its Unix socket).
type region struct {
	mem []byte
	lay regionLayout
}

// seals are what a rank's file carries before it is passed: it can never
// shrink (which would make a peer's access to the lost pages fault with
// SIGBUS) nor grow, and the seals themselves are final.
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// createRegion makes this rank's file: an anonymous memfd (no name in
// /dev/shm or anywhere else; it lives while a process maps it or holds a
// descriptor), sized, its pages allocated up front with fallocate (so
// that a shortage of memory is an error here, ErrNoSpace, and never a
// SIGBUS later), sealed, mapped, with its header written. The caller
// closes the returned descriptor once every peer has its own.
func createRegion(cfg *Config) (*region, int, error) {
	lay := layoutOf(cfg.Size, cfg.Slots, cfg.SlotSize)
	fd, err := unix.MemfdCreate("ringddp-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, -1, fmt.Errorf("shm: memfd_create: %w", err)
	}
	fail := func(err error) (*region, int, error) {
		_ = unix.Close(fd)
		return nil, -1, err
	}
	if err := unix.Ftruncate(fd, lay.total); err != nil {
		return fail(fmt.Errorf("%w: sizing the rings' file to %d bytes: %w", ErrNoSpace, lay.total, err))
	}
	if err := unix.Fallocate(fd, 0, 0, lay.total); err != nil {
		return fail(fmt.Errorf("%w: allocating %d bytes for %d rings of %d × %d bytes: %w", ErrNoSpace, lay.total, cfg.Size-1, cfg.Slots, cfg.SlotSize, err))
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fail(fmt.Errorf("shm: sealing the rings' file: %w", err))
	}
	mem, err := unix.Mmap(fd, 0, int(lay.total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("%w: mapping %d bytes: %w", ErrNoSpace, lay.total, err))
	}
	r := &region{mem: mem, lay: lay}
	h := mem[:24]
	binary.LittleEndian.PutUint32(h[0:], fileMagic)
	binary.LittleEndian.PutUint32(h[4:], fileVersion)
	binary.LittleEndian.PutUint32(h[8:], uint32(cfg.Size))
	binary.LittleEndian.PutUint32(h[12:], uint32(cfg.Rank))
	binary.LittleEndian.PutUint32(h[16:], uint32(cfg.Slots))
	binary.LittleEndian.PutUint32(h[20:], uint32(cfg.SlotSize))
	return r, fd, nil
}

// mapPeerRegion maps the file rank peer passed, after checking that it is
// a sealed memfd of exactly the size this configuration implies, and that
// its header agrees. It takes ownership of fd (closes it).
func mapPeerRegion(fd int, cfg *Config, peer int) (*region, error) {
	defer unix.Close(fd)
	lay := layoutOf(cfg.Size, cfg.Slots, cfg.SlotSize)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: rank %d's file: %w", peer, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != lay.total {
		return nil, fmt.Errorf("%w: rank %d passed a file of mode %#o and %d bytes, want a memfd of %d", ErrProtocol, peer, st.Mode, st.Size, lay.total)
	}
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || got&(unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL) != unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL {
		return nil, fmt.Errorf("%w: rank %d's file is not sealed against shrinking (seals %#x, %v)", ErrProtocol, peer, got, err)
	}
	mem, err := unix.Mmap(fd, 0, int(lay.total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mapping rank %d's %d bytes: %w", ErrNoSpace, peer, lay.total, err)
	}
	r := &region{mem: mem, lay: lay}
	h := mem[:24]
	want := []uint32{fileMagic, fileVersion, uint32(cfg.Size), uint32(peer), uint32(cfg.Slots), uint32(cfg.SlotSize)}
	for i, w := range want {
		if v := binary.LittleEndian.Uint32(h[4*i:]); v != w {
			r.unmap()
			return nil, fmt.Errorf("%w: rank %d's file header word %d is %#x, want %#x", ErrProtocol, peer, i, v, w)
		}
	}
	return r, nil
}

func (r *region) unmap() {
	if r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
}

// u32 and u64 are the words at off, for atomic access (off is aligned).
func (r *region) u32(off int64) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }
func (r *region) u64(off int64) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }

// bell is the region's doorbell.
func (r *region) bell() doorbell {
	return doorbell{seq: r.u32(bellOff), sleepers: r.u32(bellOff + 4)}
}

// statusState is the owner's status state word; the block is at statusOff.
func (r *region) statusState() *uint32 { return r.u32(statusOff) }

// setStatus records state and cause in the owner's status block, once:
// it reports false if a status was recorded already.
func (r *region) setStatus(state uint32, cause error) bool {
	if atomic.LoadUint32(r.statusState()) != stateAlive {
		return false
	}
	encodeStatus(r.mem[statusOff:statusOff+statusLen], cause)
	atomic.StoreUint32(r.statusState(), state)
	return true
}

// peerStatus is the error rank peer's status block (this region is
// peer's) records, or nil while it is alive.
func (r *region) peerStatus(peer, size int) error {
	state := atomic.LoadUint32(r.statusState())
	if state == stateAlive {
		return nil
	}
	var b [statusLen]byte
	copy(b[:], r.mem[statusOff:])
	return decodeStatus(b[:], state, peer, size)
}

var errUnmapped = errors.New("shm: region unmapped")
