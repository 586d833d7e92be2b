package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// pingGroup is the header Group of the ping-pong's messages: no group of
// the allreduce package has it, and nothing else uses the endpoints while
// the ping-pong runs.
const pingGroup = 0x70696e67 // "ping"

// pingSizes are the ping-pong's message sizes: 8 B doubling up to max.
func pingSizes(max int) []int {
	var out []int
	for b := 8; b <= max; b *= 2 {
		out = append(out, b)
		if b > math.MaxInt/2 {
			break
		}
	}
	return out
}

// pingReps is how many round trips one timed round of b-byte messages
// makes: enough to time small messages well, one for large ones.
func pingReps(b int) int { return min(100, max(1, (256<<10)/b)) }

// pingPong measures the one-way time of every size between ranks 0 and 1
// over the transport's own endpoints (Send and Recv into a copying sink,
// as the algorithms' plain receives): per size, -warmup untimed rounds
// and -iters timed ones of pingReps round trips each, and the median
// round's time per round trip, halved. It returns the times in the
// process holding rank 0, nil elsewhere; ranks other than 0 and 1 take no
// part.
func pingPong(ctx context.Context, cfg *config, conns []transport.Conn, sizes []int) ([]float64, error) {
	var r0, r1 transport.Conn
	for _, c := range conns {
		switch c.Rank() {
		case 0:
			r0 = c
		case 1:
			r1 = c
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		errs [2]error
		out  []float64
	)
	if r1 != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[1] = pingSide(ctx, cfg, r1, sizes, nil); errs[1] != nil {
				cancel()
			}
		}()
	}
	if r0 != nil {
		out = make([]float64, len(sizes))
		if errs[0] = pingSide(ctx, cfg, r0, sizes, out); errs[0] != nil {
			cancel()
		}
	}
	wg.Wait()
	if err := errors.Join(errs[0], errs[1]); err != nil {
		return nil, err
	}
	return out, nil
}

// pingSide is one rank's part: rank 0 sends first and times (into
// oneWay), rank 1 echoes.
func pingSide(ctx context.Context, cfg *config, c transport.Conn, sizes []int, oneWay []float64) error {
	peer := 1 - c.Rank()
	lead := c.Rank() == 0
	largest := sizes[len(sizes)-1]
	buf := make([]byte, largest)
	sink := &pingSink{dst: make([]byte, largest)}
	times := make([]float64, cfg.iters)
	for si, n := range sizes {
		reps := pingReps(n)
		var step uint32
		for round := range cfg.warmup + cfg.iters {
			t0 := time.Now()
			for range reps {
				h := transport.Header{Group: pingGroup, Seq: uint64(si), Root: -1, Count: int64(n), Step: step}
				step++
				var err error
				if lead {
					if err = c.Send(ctx, peer, h, buf[:n]); err == nil {
						err = c.Recv(ctx, peer, h, n, sink)
					}
				} else if err = c.Recv(ctx, peer, h, n, sink); err == nil {
					err = c.Send(ctx, peer, h, sink.dst[:n])
				}
				if err != nil {
					return fmt.Errorf("%d-byte messages: %w", n, err)
				}
			}
			if round >= cfg.warmup {
				times[round-cfg.warmup] = time.Since(t0).Seconds() / float64(reps) / 2
			}
		}
		if lead {
			oneWay[si] = median(times)
		}
	}
	return nil
}

// pingSink copies a received message into dst (a transport.Placer, as
// the algorithms' copying receives are).
type pingSink struct{ dst []byte }

func (s *pingSink) Consume(off int, p []byte) { copy(s.dst[off:], p) }
func (s *pingSink) Place(n int) []byte        { return s.dst[:n] }

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
	return median(times), bytes, nil
}
