package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/bytesize"
)

// Calibrating on a loaded host: the rounds of one size of a ring exchange
// (ringExchange) can run at paces far apart when another job takes the
// cores or the link for part of them, and the median of three is then
// one of the slow ones as often as not. So each ring member checks its
// rounds' spread (the slowest over the fastest); where some member's
// exceeds paceSpread, every rank agrees to time that size again, -iters
// more rounds at a time, up to maxExtraBatches times, and the median is
// over them all. The agreement is a dissemination all-reduce of one flag
// (agreeAll) among every rank, ring members or not, so that every rank
// makes the same number of exchanges; it also starts each size on every
// rank together (the rings of every local rank at once, timed for
// Model.NICs, must overlap). The report says where rounds were added and
// how far the paces stayed apart (paceRecord.note).
const (
	paceSpread      = 1.5
	maxExtraBatches = 2
)

// agreeGroup is the header Group of the agreements (each ring's group
// plus agreeOffset: no ring's copying or reducing group).
const agreeOffset = 0x100

// spread is the slowest of times over the fastest (1 for fewer than two).
func spread(times []float64) float64 {
	if len(times) < 2 || slices.Min(times) <= 0 {
		return 1
	}
	return slices.Max(times) / slices.Min(times)
}

// pacesDiffer reports whether times' rounds ran at paces more than
// paceSpread apart.
func pacesDiffer(times []float64) bool { return spread(times) > paceSpread }

// agreeAll is the OR of every rank's flag, on every rank: ⌈log2 n⌉
// exchanges of one byte, rank r sending to r+d and receiving from r−d for
// d = 1, 2, 4, ... (a dissemination barrier carrying the flag). size and
// batch tell the agreements of one ringExchange apart in the headers.
func agreeAll(ctx context.Context, c transport.Conn, group uint32, size, batch int, flag bool) (bool, error) {
	n, r := c.Size(), c.Rank()
	var mine [1]byte
	if flag {
		mine[0] = 1
	}
	in := &pingSink{dst: make([]byte, 1)}
	step := uint32(0)
	for d := 1; d < n; d *= 2 {
		h := transport.Header{Group: group + agreeOffset, Seq: uint64(size), Root: int32(batch), Count: 1, Step: step}
		step++
		if err := exchange(ctx, c, (r+d)%n, h, mine[:], (r-d+n)%n, 1, in); err != nil {
			return false, fmt.Errorf("agreeing on the rounds of size %d: %w", size, err)
		}
		mine[0] |= in.dst[0]
	}
	return mine[0] != 0, nil
}

// paceRecord is rank 0's record of a ringExchange: per size, the rounds
// timed and their spread.
type paceRecord struct {
	rounds []int
	spread []float64
}

// note is the report's line on the rounds: where some were added, and
// the largest spread left; "" where every size took -iters rounds and
// they agreed within paceSpread (nil: not rank 0's process).
func (p *paceRecord) note(sizes []int, iters int) string {
	if p == nil {
		return ""
	}
	var added []string
	worst, at := 1.0, 0
	for i, n := range p.rounds {
		if n > iters {
			added = append(added, fmt.Sprintf("%s (%d)", bytesize.Format(sizes[i]), n))
		}
		if p.spread[i] > worst {
			worst, at = p.spread[i], sizes[i]
		}
	}
	if len(added) == 0 && worst <= paceSpread {
		return ""
	}
	s := fmt.Sprintf("# rounds' paces: the slowest round up to %.2fx the fastest (at %s)", worst, bytesize.Format(at))
	if len(added) > 0 {
		s += fmt.Sprintf("; rounds were added where some rank's differed by more than %.1fx: %s rounds", paceSpread, strings.Join(added, ", "))
	}
	return s + "\n"
}
