package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/calibrate"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// pingGroup is the header Group of the ping-pong's messages: no group of
// the allreduce package has it, and nothing else uses the endpoints while
// the ping-pong runs.
const pingGroup = 0x70696e67 // "ping"

// pingReps is how many steps one timed round of b-byte messages makes:
// enough to time small messages well, one for large ones.
func pingReps(b int) int { return min(100, max(1, (256<<10)/b)) }

// ringExchange measures, for every size, the time of one step of a ring
// over the transport's own endpoints with every rank taking part at once,
// as every step of the algorithms does: each rank sends n bytes to its
// right neighbour while it receives n bytes from its left one (Exchange),
// into a copying sink or, with reduce, a sink that adds the payload into
// a buffer (allreduce.Combine, float32 sum) as the algorithms' reducing
// receives do. Per size, -warmup untimed rounds and -iters timed ones of
// pingReps steps each; the median round's time per step. Timing all ranks
// at once (not a ping-pong between two of them while the others idle)
// charges α and β what they cost when N ranks share the host's cores and
// memory. It returns the times in the process holding rank 0, nil
// elsewhere. ring says which ranks take part and whom each sends to and
// receives from (allRanks: the ring of every rank; linkcalib.go's rings
// within and between nodes).
func ringExchange(ctx context.Context, cfg *config, conns []transport.Conn, sizes []int, reduce bool, ring exchangeRing) ([]float64, string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		out  []float64
		rec  *paceRecord
	)
	for _, c := range conns {
		var times []float64
		var pr *paceRecord
		if c.Rank() == 0 {
			out = make([]float64, len(sizes))
			times = out
			rec = &paceRecord{rounds: make([]int, len(sizes)), spread: make([]float64, len(sizes))}
			pr = rec
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			right, left, ok := ring.peers(c.Rank(), c.Size())
			side := ringSide{cfg: cfg, c: c, sizes: sizes, reduce: reduce, perStep: times, pace: pr,
				right: right, left: left, member: ok, ring: ring}
			if err := side.run(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("rank %d: %w", c.Rank(), err))
				mu.Unlock()
				cancel()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, "", err
	}
	return out, rec.note(sizes, cfg.iters), nil
}

// exchangeRing is a ring of ringExchange: peers gives rank r of n ranks
// its right and left neighbours, ok false where r takes no part (rank 0
// always does: it records the times); group is the header Group of its
// copying messages, group+1 of its reducing ones (rings timed one after
// another use distinct ones).
//
// stream, where set, is the fewest bytes a timed round of messages over
// streamFrom bytes sends (more steps than pingReps), and the bytes of the
// one message (primeBytes) each batch of rounds of smaller messages
// starts with: a link shaped by a token bucket (the test bed's tc tbf; a
// cloud NIC's burst allowance) carries a lone message that fits its
// bucket at the wire's speed and a stream at its rate. A collective's
// pieces follow one another, the mid-sized ones as pieces of a stream
// (Model.Segment), the small ones each after the pieces of the steps
// before, so the ring between nodes (interRing) times the mid-sized
// messages streamed and the small ones after a message that empties the
// bucket: they go at the link's rate where they are sent faster than it,
// at their own pace where not (the bucket filling between them), as they
// do inside an all-reduce.
type exchangeRing struct {
	peers  func(r, n int) (right, left int, ok bool)
	group  uint32
	stream int
}

// streamFrom is the smallest message a ring with stream times streamed:
// smaller ones are latency-bound and sent alone by the algorithms at
// small sizes.
const streamFrom = 32 << 10

// reps is how many steps a timed round of b-byte messages makes on ring:
// pingReps, or enough to send stream bytes.
func (r exchangeRing) reps(b int) int {
	if r.stream > 0 && b >= streamFrom {
		return max(pingReps(b), (r.stream+b-1)/b)
	}
	return pingReps(b)
}

// primeBytes is the message that starts each batch of rounds of b-byte
// messages on ring, empty the link's bucket (0: none): stream bytes, at
// most the largest message, before messages under streamFrom on a
// streamed ring; none before larger ones, whose first round streams.
func (r exchangeRing) primeBytes(b, largest int) int {
	if r.stream > 0 && b < streamFrom {
		return min(r.stream, largest)
	}
	return 0
}

// allRanks is the ring of every rank, in rank order.
var allRanks = exchangeRing{group: pingGroup, peers: func(r, n int) (int, int, bool) {
	return (r + 1) % n, (r + n - 1) % n, true
}}

// ringSide is one rank's part of ringExchange (rank 0 records the times
// into perStep, and pace, nil on other ranks); a rank outside the ring
// (member false) takes part in the agreements only (paces.go).
type ringSide struct {
	cfg         *config
	c           transport.Conn
	sizes       []int
	reduce      bool
	perStep     []float64
	pace        *paceRecord
	right, left int
	member      bool
	ring        exchangeRing
}

// run times every size: -warmup untimed rounds and -iters timed ones
// (after the ring's prime message, where it has one: primeBytes), then, while some member's rounds' paces differ (paces.go), up to
// maxExtraBatches more batches of -iters rounds; the median of them all.
func (s *ringSide) run(ctx context.Context) error {
	largest := s.sizes[len(s.sizes)-1]
	buf := make([]byte, largest)
	var sink transport.Sink = &pingSink{dst: make([]byte, largest)}
	if s.reduce {
		sink = &addSink{dst: make([]byte, largest)}
	}
	group := s.ring.group
	if s.reduce {
		group++
	}
	for si, b := range s.sizes {
		reps := s.ring.reps(b)
		var step uint32
		var times []float64
		timeRounds := func(n, untimed int) error {
			if !s.member {
				return nil
			}
			if p := s.ring.primeBytes(b, largest); p > 0 {
				h := transport.Header{Group: group, Seq: uint64(si), Root: -1, Count: int64(p), Step: step}
				step++
				if err := exchange(ctx, s.c, s.right, h, buf[:p], s.left, p, sink); err != nil {
					return fmt.Errorf("the %d-byte message before the %d-byte ones: %w", p, b, err)
				}
			}
			for round := range untimed + n {
				t0 := time.Now()
				for range reps {
					h := transport.Header{Group: group, Seq: uint64(si), Root: -1, Count: int64(b), Step: step}
					step++
					if err := exchange(ctx, s.c, s.right, h, buf[:b], s.left, b, sink); err != nil {
						return fmt.Errorf("%d-byte messages: %w", b, err)
					}
				}
				if round >= untimed {
					times = append(times, time.Since(t0).Seconds()/float64(reps))
				}
			}
			return nil
		}
		// Every rank starts the size together (the rings of every local
		// rank at once must overlap to show how they share a link).
		if _, err := agreeAll(ctx, s.c, s.ring.group, si, 0, false); err != nil {
			return err
		}
		if err := timeRounds(s.cfg.iters, s.cfg.warmup); err != nil {
			return err
		}
		for batch := 1; batch <= maxExtraBatches; batch++ {
			more, err := agreeAll(ctx, s.c, s.ring.group, si, batch, s.member && pacesDiffer(times))
			if err != nil {
				return err
			}
			if !more {
				break
			}
			if err := timeRounds(s.cfg.iters, 0); err != nil {
				return err
			}
		}
		if s.perStep != nil {
			s.perStep[si] = calibrate.Median(times)
			s.pace.rounds[si], s.pace.spread[si] = len(times), spread(times)
		}
	}
	return nil
}

// exchange is c's Exchange, or a Send on a second goroutine beside the
// Recv where the transport lacks it.
func exchange(ctx context.Context, c transport.Conn, to int, h transport.Header, p []byte, from, n int, sink transport.Sink) error {
	if ex, ok := c.(transport.Exchanger); ok {
		return ex.Exchange(ctx, to, h, p, from, h, n, sink)
	}
	sent := make(chan error, 1)
	go func() { sent <- c.Send(ctx, to, h, p) }()
	rerr := c.Recv(ctx, from, h, n, sink)
	return errors.Join(rerr, <-sent)
}

// pingSink copies a received message into dst (a transport.Placer, as
// the algorithms' copying receives are).
type pingSink struct{ dst []byte }

func (s *pingSink) Consume(off int, p []byte) { copy(s.dst[off:], p) }
func (s *pingSink) Place(n int) []byte        { return s.dst[:n] }

// addSink adds a received float32 payload into dst, as the algorithms'
// reducing receives do (not a Placer).
type addSink struct{ dst []byte }

func (s *addSink) Consume(off int, p []byte) {
	out := s.dst[off : off+len(p)]
	_ = allreduce.Combine(allreduce.Float32, allreduce.Sum, out, out, p)
}

// gammaBytes is the buffer the reduce kernel is timed on: large, so that
// it runs at memory speed as the large all-reduces do, but no larger than
// the ping-pong's largest message (tests calibrate on tiny sizes).
func gammaBytes(calibMax int) int { return max(4096, min(calibMax, 32<<20)) &^ 7 }

// measureGamma times the reduce kernel the collectives run on every
// received payload (allreduce.Combine, float32 sum, in place as the
// receiving sink does) over gammaBytes: the median over -iters rounds
// (after -warmup) of the seconds per byte.
func measureGamma(cfg *config) (gamma float64, bytes int, err error) {
	bytes = gammaBytes(cfg.calibMax)
	out, in := make([]byte, bytes), make([]byte, bytes)
	one := math.Float32bits(1)
	for i := 0; i < bytes; i += 4 {
		out[i], out[i+1], out[i+2], out[i+3] = byte(one), byte(one>>8), byte(one>>16), byte(one>>24)
	}
	copy(in, out)
	reps := min(100, max(1, (1<<20)/bytes))
	rounds := max(cfg.iters, 3)
	times := make([]float64, rounds)
	for round := range cfg.warmup + rounds {
		t0 := time.Now()
		for range reps {
			if err := allreduce.Combine(allreduce.Float32, allreduce.Sum, out, out, in); err != nil {
				return 0, 0, err
			}
		}
		if round >= cfg.warmup {
			times[round-cfg.warmup] = time.Since(t0).Seconds() / float64(reps) / float64(bytes)
		}
	}
	return calibrate.Median(times), bytes, nil
}
