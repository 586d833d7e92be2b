package shm

// The layout of one rank's shared file (a memfd), which holds the rings
// into that rank, its doorbell and its status. Rank r's file, in a world
// of N ranks with S slots of C payload bytes per ring (little-endian,
// offsets in bytes):
//
//	0       file header, written once by r before the file is passed:
//	          magic "RDSM" u32 | version u32 | N u32 | r u32 | S u32 | C u32
//	64      doorbell: seq u32 (futex word) | sleepers u32
//	128     status block (statusLen bytes), written once by r: see status.go
//	2048    stall block (stallBlockLen bytes), written once by r: see stall.go
//	4096    ring controls, one per peer p ≠ r in rank order (ctlLen each):
//	          +0   head u64: slots published by p (written by p only)
//	          +64  tail u64: slots consumed by r (written by r only)
//	          +128 nack block (nackLen), written once by r: see status.go
//	slots   S slots per ring, ring i's slot k at slots + (i·S + k)·(slotHeaderLen + C):
//	          a slotHeaderLen-byte header (slot.go), then C payload bytes
//	expose  the exposure area (expose.go), page-aligned after the slots:
//	          a 64-byte control line, then two exposure buffers of
//	          exposeHeaderLen + exposeCap bytes each
//
// Rank r waits on its own doorbell for anything: peers ring it after
// publishing into a ring into r, after consuming from a ring out of r (in
// their files), and when they fail or close. A ring's head and tail are
// counts of slots; the producer writes slot head mod S and then stores
// head+1, the consumer reads it and then stores tail+1 (sequentially
// consistent atomics on both sides).
const (
	fileMagic   = 0x4d534452 // "RDSM"
	fileVersion = 2

	bellOff    = 64
	statusOff  = 128
	controlOff = 4096
	ctlLen     = 256
	headOff    = 0
	tailOff    = 64
	nackOff    = 128
	pageSize   = 4096
)

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// regionLayout is the geometry of one rank's file.
type regionLayout struct {
	size, slots, slotSize int
	slotsOff              int64 // where the first ring's slots start
	stride                int64 // bytes per slot, header included
	exposeOff             int64 // where the exposure area starts
	total                 int64 // the file's size
}

func layoutOf(size, slots, slotSize int) regionLayout {
	l := regionLayout{size: size, slots: slots, slotSize: slotSize}
	rings := int64(max(size-1, 0))
	l.slotsOff = controlOff + roundUp(rings*ctlLen, pageSize)
	l.stride = slotHeaderLen + int64(slotSize)
	l.exposeOff = roundUp(l.slotsOff+rings*int64(slots)*l.stride, pageSize)
	l.total = roundUp(l.exposeOff+exposeAreaLen, pageSize)
	return l
}

// regionSize is the size of a rank's file.
func regionSize(size, slots, slotSize int) int64 { return layoutOf(size, slots, slotSize).total }

// ringIndex is where the ring from peer into owner sits in owner's file.
func ringIndex(owner, peer int) int {
	if peer < owner {
		return peer
	}
	return peer - 1
}

// controlAt is the offset of ring i's control block.
func (l regionLayout) controlAt(i int) int64 { return controlOff + int64(i)*ctlLen }

// slotAt is the offset of slot k of ring i.
func (l regionLayout) slotAt(i, k int) int64 {
	return l.slotsOff + (int64(i)*int64(l.slots)+int64(k))*l.stride
}
