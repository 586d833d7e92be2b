package trace

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// Sample is one NTP exchange between a rank (the client) and rank 0 (the
// reference): the client sends at T1, rank 0 receives at T2 and replies
// at T3, the client receives the reply at T4; T1 and T4 are on the
// client's clock, T2 and T3 on rank 0's, all in nanoseconds.
type Sample struct{ T1, T2, T3, T4 int64 }

// Offset is the client's clock minus the reference clock, assuming the
// two legs took equally long: -((T2-T1) + (T3-T4)) / 2.
func (s Sample) Offset() time.Duration {
	return -time.Duration(((s.T2 - s.T1) + (s.T3 - s.T4)) / 2)
}

// Delay is the round trip less rank 0's time between receiving and
// replying: (T4-T1) - (T3-T2). The offset's error is at most Delay/2.
func (s Sample) Delay() time.Duration { return time.Duration((s.T4 - s.T1) - (s.T3 - s.T2)) }

// Estimate is NTP's clock filter: the offset of the sample with the least
// delay, and that delay (the estimate is within delay/2 of the truth when
// the clocks do not drift during the exchange).
func Estimate(samples []Sample) (offset, delay time.Duration, err error) {
	if len(samples) == 0 {
		return 0, 0, errors.New("trace: no clock samples")
	}
	best := samples[0]
	for _, s := range samples[1:] {
		if s.Delay() < best.Delay() {
			best = s
		}
	}
	return best.Offset(), best.Delay(), nil
}

// DefaultRounds is the number of exchanges SyncClock makes per rank.
const DefaultRounds = 8

// clockGroup is the header group id of SyncClock's messages, which run on
// a connection before any allreduce.Group uses it.
const clockGroup = 0xC10C5EED

// clockKind is their header kind, no collective's.
const clockKind = 0xEE

// Clock reads a clock in nanoseconds (the Unix time: time.Now().UnixNano).
type Clock func() int64

// WallClock is the Unix time in nanoseconds.
func WallClock() int64 { return time.Now().UnixNano() }

// SyncClock estimates this rank's clock offset from rank 0's (this rank's
// minus rank 0's) with rounds NTP exchanges (Sample) over conn, and the
// delay of the best one; rank 0 serves every other rank in turn and gets
// 0. Every rank of conn's world must call it, on a connection no
// allreduce.Group has used yet (its messages carry their own header
// group). now is the clock compared (nil: WallClock).
func SyncClock(ctx context.Context, conn transport.Conn, rounds int, now Clock) (offset, delay time.Duration, err error) {
	if now == nil {
		now = WallClock
	}
	rounds = max(rounds, 1)
	n, rank := conn.Size(), conn.Rank()
	if n <= 1 {
		return 0, 0, nil
	}
	hdr := func(k, step int) transport.Header {
		return transport.Header{Group: clockGroup, Seq: uint64(k), Kind: clockKind, Root: -1, Count: 2, Step: uint32(step)}
	}
	var sink bufSink
	if rank == 0 {
		for peer := 1; peer < n; peer++ {
			for k := range rounds {
				if err := conn.Recv(ctx, peer, hdr(k, 0), 8, &sink); err != nil {
					return 0, 0, fmt.Errorf("trace: clock exchange with rank %d: %w", peer, err)
				}
				t2 := now()
				var reply [16]byte
				binary.LittleEndian.PutUint64(reply[:8], uint64(t2))
				binary.LittleEndian.PutUint64(reply[8:], uint64(now()))
				if err := conn.Send(ctx, peer, hdr(k, 1), reply[:]); err != nil {
					return 0, 0, fmt.Errorf("trace: clock exchange with rank %d: %w", peer, err)
				}
			}
		}
		return 0, 0, nil
	}
	samples := make([]Sample, 0, rounds)
	for k := range rounds {
		var req [8]byte
		t1 := now()
		binary.LittleEndian.PutUint64(req[:], uint64(t1))
		if err := conn.Send(ctx, 0, hdr(k, 0), req[:]); err != nil {
			return 0, 0, fmt.Errorf("trace: clock exchange with rank 0: %w", err)
		}
		if err := conn.Recv(ctx, 0, hdr(k, 1), 16, &sink); err != nil {
			return 0, 0, fmt.Errorf("trace: clock exchange with rank 0: %w", err)
		}
		t4 := now()
		samples = append(samples, Sample{T1: t1, T2: int64(binary.LittleEndian.Uint64(sink.b[:8])),
			T3: int64(binary.LittleEndian.Uint64(sink.b[8:16])), T4: t4})
	}
	return Estimate(samples)
}

// bufSink keeps the first 16 bytes of a message.
type bufSink struct{ b [16]byte }

func (s *bufSink) Consume(off int, p []byte) {
	if off < len(s.b) {
		copy(s.b[off:], p)
	}
}
