package cost

import "math"

// Link is the cost of messages over one kind of link: Alpha seconds per
// message plus Beta seconds per byte, in up to three regimes of message
// size. Where CacheBytes is set, messages of at most that many bytes cost
// CacheBeta per byte instead: memory moves several times faster while a
// message fits the caches, which is what in-process and loopback
// transports are made of. Where SmallBytes is set too (SmallBytes ≤
// CacheBytes, or alone), messages of at most SmallBytes bytes cost
// SmallBeta per byte: on loopback tcp a message that fits the socket
// buffers is written in one go and read as it lands, and costs little
// beyond its latency. cmd/bench -calibrate fits the regimes that the
// measurements show; a zero size means no such regime (profiles written
// before a regime existed read as having none).
type Link struct {
	Alpha      float64 `json:"alpha_s"`
	Beta       float64 `json:"beta_s_per_byte"`
	CacheBeta  float64 `json:"cache_beta_s_per_byte,omitempty"`
	CacheBytes int     `json:"cache_bytes,omitempty"`
	SmallBeta  float64 `json:"small_beta_s_per_byte,omitempty"`
	SmallBytes int     `json:"small_bytes,omitempty"`

	// share, when above 1, is how many messages leave through one NIC
	// at once with this one (Model.NICs; set by Shared, never stored).
	share float64
}

// Time is the time of one message of b bytes: α + b·β; shared by k
// messages on one NIC, the later of that and k·b·β, the time the NIC
// takes to carry them all (the queue's later messages wait on it, the
// earlier ones on their latency, and over the steps of a schedule the
// ranks keep the offsets the queue gave them).
func (l Link) Time(b float64) float64 {
	tx := l.Transfer(b)
	if l.share > 1 {
		return math.Max(l.Alpha+tx, l.share*tx)
	}
	return l.Alpha + tx
}

// Transfer is the per-byte part of a message of b bytes: the time it
// occupies the sender's link.
func (l Link) Transfer(b float64) float64 {
	switch {
	case l.SmallBytes > 0 && b <= float64(l.SmallBytes):
		return b * l.SmallBeta
	case l.CacheBytes > 0 && b <= float64(l.CacheBytes):
		return b * l.CacheBeta
	}
	return b * l.Beta
}

// Shared is l as one of k messages that leave through one NIC at once
// (Time).
func (l Link) Shared(k float64) Link {
	l.share = max(l.share, 1) * k
	return l
}

// QueuedTransfer is the per-byte part of a message of b bytes sent
// alone, with the messages that share its NIC ahead of it (Shared):
// Transfer times the share.
func (l Link) QueuedTransfer(b float64) float64 { return l.Transfer(b) * max(l.share, 1) }
