package cuda

import (
	"fmt"
	"sort"
	"sync"
)

// HostSystem is the host device's stand-in for the CUDA driver of one
// process: one address space of device memory shared by every context
// (host device) opened on it, so that memory of one context is
// recognisable, and refusable, in another, as on a GPU with unified
// addressing. Device memory is host byte slices at made-up addresses
// (256-byte aligned, with a gap after each allocation, so that a read past
// an allocation's end is a fault, not another allocation's bytes).
type HostSystem struct {
	opts []HostOption

	mu      sync.Mutex
	next    uintptr      // the next free address
	allocs  []*hostAlloc // sorted by base
	nextCtx uintptr
}

// hostAlloc is one allocation: its bytes, its address and its context
// (0 for managed memory).
type hostAlloc struct {
	base    uintptr
	mem     []byte
	context uintptr
	device  int
}

// NewHostSystem makes an empty address space; every host device opened on
// it gets opts (see HostOption).
func NewHostSystem(opts ...HostOption) *HostSystem {
	return &HostSystem{opts: opts, next: 1 << 40, nextCtx: 0xc0}
}

func (s *HostSystem) newContext() uintptr {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextCtx += 0x10
	return s.nextCtx
}

func (s *HostSystem) alloc(bytes int, context uintptr, device int) uintptr {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := &hostAlloc{base: s.next, mem: make([]byte, bytes), context: context, device: device}
	s.next += (uintptr(bytes) + 2*256 - 1) &^ 255
	s.allocs = append(s.allocs, a) // addresses only grow: still sorted
	return a.base
}

// AllocManaged allocates managed memory (cuMemAllocManaged): usable by
// every context's kernels. It stays allocated until FreeManaged.
func (s *HostSystem) AllocManaged(bytes int) uintptr {
	return s.alloc(max(bytes, 1), 0, -1)
}

// FreeManaged frees memory of AllocManaged.
func (s *HostSystem) FreeManaged(p uintptr) error { return s.free(p, 0) }

func (s *HostSystem) free(p, context uintptr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(p)
	if i < 0 || s.allocs[i].base != p {
		return fmt.Errorf("%#x is not the start of an allocation", p)
	}
	if c := s.allocs[i].context; c != context {
		return fmt.Errorf("%#x belongs to context %#x, not %#x", p, c, context)
	}
	s.allocs = append(s.allocs[:i], s.allocs[i+1:]...)
	return nil
}

// find is the index of the allocation holding p, or -1. s.mu is held.
func (s *HostSystem) find(p uintptr) int {
	i := sort.Search(len(s.allocs), func(i int) bool { return s.allocs[i].base > p }) - 1
	if i < 0 || p >= s.allocs[i].base+uintptr(len(s.allocs[i].mem)) {
		return -1
	}
	return i
}

// bytes is the n bytes at p, which must lie in one allocation that the
// context may use (its own or managed memory): what a kernel or copy of
// that context touches. The fault is what CUDA reports as an illegal
// address.
func (s *HostSystem) bytes(p uintptr, n int, context uintptr) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(p)
	if i < 0 {
		return nil, fmt.Errorf("illegal address %#x (%d bytes): no allocation there", p, n)
	}
	a := s.allocs[i]
	off := int(p - a.base)
	if off+n > len(a.mem) {
		return nil, fmt.Errorf("illegal address: %d bytes at %#x run past the end of the %d-byte allocation at %#x", n, p, len(a.mem), a.base)
	}
	if a.context != 0 && a.context != context {
		return nil, fmt.Errorf("illegal address %#x: memory of context %#x used in context %#x", p, a.context, context)
	}
	return a.mem[off : off+n : off+n], nil
}

func (s *HostSystem) info(p uintptr) (memInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(p)
	if i < 0 {
		return memInfo{}, fmt.Errorf("%#x is not device memory", p)
	}
	a := s.allocs[i]
	return memInfo{context: a.context, managed: a.context == 0, device: a.device}, nil
}
