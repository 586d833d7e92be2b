package cost

// DefaultModel is the model a group uses when none is given
// (allreduce.WithModel): for ranks that share memory, this project's
// in-process transport, and for the others its tcp transport over
// loopback, both as `cmd/bench -calibrate -ranks 4` measured them (the
// profiles in allreduce/testdata/profiles, rounded; fitted without the
// cores bound: a default cannot know the host's cores, and every rank
// must use the same model). Calibrate on the machine at hand for better
// choices.
func DefaultModel(peerMemory bool) Model {
	return DefaultModelFor(Shape{PeerMemory: peerMemory})
}

// DefaultModelFor is the default model for a group of shape s: ranks in
// one address space (PeerMemory, no LendLimit), ranks of one host that
// lend copies in shared memory (shm: PeerMemory with a LendLimit, as
// testdata/profiles/shm-4.json measured it, rounded), or ranks that only
// exchange messages (DefaultModel(false)).
func DefaultModelFor(s Shape) Model {
	if s.PeerMemory && s.LendLimit > 0 {
		l := Link{Alpha: 1.99e-6, Beta: 1 / 2.00e9, CacheBeta: 1 / 3.36e9, CacheBytes: 8 << 20, SmallBeta: 1 / 5.19e9, SmallBytes: 512 << 10}
		return Model{Intra: l, Inter: l, Gamma: 1 / 29.0e9, Ports: 2, LoneAlpha: 0.841}
	}
	if s.PeerMemory {
		l := Link{Alpha: 4.44e-6, Beta: 1 / 4.89e9, CacheBeta: 1 / 9.78e9, CacheBytes: 8 << 20, SmallBeta: 1 / 30.2e9, SmallBytes: 256 << 10}
		return Model{Intra: l, Inter: l, Gamma: 1 / 7.89e9, Ports: 2, LoneAlpha: 0.595}
	}
	l := Link{Alpha: 18.26e-6, Beta: 1 / 2.115e9, CacheBeta: 1 / 2.742e9, CacheBytes: 128 << 10, SmallBeta: 1 / 3.261e9, SmallBytes: 32 << 10}
	return Model{Intra: l, Inter: l, Gamma: 1 / 8.781e9, Ports: 2, Segment: TCPSegmentBytes, LoneAlpha: 0.595}
}

// TCPSegmentBytes is the default model's Segment for ranks that only
// exchange messages: on loopback tcp, 256 KiB pieces sent in lock step
// were read while still cached, where whole messages of a few MiB were
// not (Model.Segment).
const TCPSegmentBytes = 256 << 10
