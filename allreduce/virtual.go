package allreduce

// virtualMemory is the optional capability of a simulating transport
// whose payloads are accounted, not moved (package sim's timing-only
// mode): memory it hands out is never read or written, by the transport
// or by the algorithms, so a simulated call of 256 MiB on 1024 ranks
// needs no 256 GiB. A call whose buffer is virtual runs its algorithm
// unchanged except that its scratch memory is virtual too and its local
// copies and divisions (Avg) are skipped: the schedule, the messages and
// their sizes are the same as with real payloads.
type virtualMemory interface {
	// Virtual reports whether p lies in such memory.
	Virtual(p []byte) bool
	// VirtualBytes returns n bytes of it.
	VirtualBytes(n int) []byte
}

// startCall notes whether call c runs on virtual memory (virtualMemory).
func (g *Group) startCall(c *call) {
	g.virtualCall = g.virtual != nil && (g.virtual.Virtual(c.buf) || g.virtual.Virtual(c.src))
}

// localCopy copies src into dst: an algorithm's own copy, skipped on
// virtual memory.
func (g *Group) localCopy(dst, src []byte) {
	if !g.virtualCall {
		copy(dst, src)
	}
}

// divide divides every element of buf by n (Avg), except on virtual
// memory.
func (g *Group) divide(dt DType, buf []byte, n int) {
	if !g.virtualCall {
		divideBytes(dt, buf, n)
	}
}
