package heal

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
)

// failure is a rank's failure in step 3, told in step 4.
type failure struct {
	code          int64 // 0: none; failChecksum
	sender, strip int
}

const failChecksum = 1

// The verdict each rank all-gathers in step 4, as int64 words.
const (
	vCode    = 0 // failure code
	vSender  = 1 // the failing stripe's sender
	vStripe  = 2 // and index
	vSent    = 3 // bytes this rank sent
	vParams  = 4 // SHA-256 of the parameters (4 words)
	vOptim   = 8 // SHA-256 of the optimizer state (4 words)
	verdictW = 12
)

// stripes is step 3: stripe i from senders[i] to the joiners, in the group
// of the two (or more, with several joiners), segment by segment, then its
// digest.
func (h *healer[T]) stripes(ctx context.Context) error {
	rank, m := h.g.Rank(), len(h.senders)
	groups := make([]*allreduce.Group, m)
	for i, s := range h.senders {
		colour, key := -1, 0
		if rank == s {
			colour = i
		} else if h.joiner {
			colour, key = i, 1+rank
		}
		sub, err := h.g.Split(ctx, colour, key)
		if err != nil {
			return fmt.Errorf("heal: making the group of rank %d and the joiners: %w", s, err)
		}
		groups[i] = sub
	}
	defer func() {
		for _, sub := range groups {
			if sub != nil {
				_ = sub.Close()
			}
		}
	}()
	var secs [][]byte
	if h.joiner {
		secs = h.sectionsIn()
	} else {
		secs = sections(h.st)
	}
	total := (h.streamLen() + 7) / 8
	scratch := make([]int64, max(1, min(h.cfg.segment, (total+m-1)/m)))
	for i, s := range h.senders {
		if groups[i] == nil {
			continue
		}
		lo, hi := allreduce.ChunkBounds(total, m, i)
		if err := h.stripe(ctx, groups[i], secs, scratch, i, s, lo, hi); err != nil {
			return err
		}
	}
	return nil
}

// stripe moves words [lo, hi) of the stream from sender s (stripe i) in sub.
func (h *healer[T]) stripe(ctx context.Context, sub *allreduce.Group, secs [][]byte, scratch []int64, i, s, lo, hi int) error {
	sum := sha256.New()
	for w := lo; w < hi; w += len(scratch) {
		buf := scratch[:min(len(scratch), hi-w)]
		b := bytesOf(buf)
		if !h.joiner {
			clear(b)
			copyOut(secs, 8*w, b)
			_, _ = sum.Write(b)
			if h.cfg.corrupt != nil {
				h.cfg.corrupt(i, b)
			}
			h.sentByMe += int64(len(b))
		}
		if err := allreduce.Broadcast(ctx, sub, buf, 0); err != nil {
			return fmt.Errorf("heal: stripe %d of %d (words [%d, %d) of the state) from rank %d: %w", i, len(h.senders), lo, hi, s, err)
		}
		if h.joiner {
			_, _ = sum.Write(b)
			copyIn(secs, 8*w, b)
		}
	}
	local := words(sum.Sum(nil))
	d := local
	if err := allreduce.Broadcast(ctx, sub, d[:], 0); err != nil {
		return fmt.Errorf("heal: the checksum of stripe %d from rank %d: %w", i, s, err)
	}
	if h.joiner && d != local && h.failure.code == 0 {
		h.failure = failure{code: failChecksum, sender: s, strip: i}
	}
	return nil
}

// copyOut copies the stream's bytes from offset off into dst (zeros past
// its end).
func copyOut(secs [][]byte, off int, dst []byte) {
	for _, s := range secs {
		if off >= len(s) {
			off -= len(s)
			continue
		}
		n := copy(dst, s[off:])
		dst, off = dst[n:], 0
		if len(dst) == 0 {
			return
		}
	}
}

// copyIn copies src into the stream's bytes from offset off (the padding
// past its end is dropped).
func copyIn(secs [][]byte, off int, src []byte) {
	for _, s := range secs {
		if off >= len(s) {
			off -= len(s)
			continue
		}
		n := copy(s[off:], src)
		src, off = src[n:], 0
		if len(src) == 0 {
			return
		}
	}
}

// verdict is step 4: every rank's status, bytes sent and digests,
// gathered and judged; a joiner then takes the state.
func (h *healer[T]) verdict(ctx context.Context) ([]int64, error) {
	n := h.g.Size()
	mine := make([]int64, verdictW)
	mine[vCode], mine[vSender], mine[vStripe] = h.failure.code, int64(h.failure.sender), int64(h.failure.strip)
	mine[vSent] = h.sentByMe
	held, params := h.st, h.st.Params
	if h.joiner {
		held = &h.in
		if !h.st.ParamsHeld {
			params = h.in.Params
		}
	}
	pd, od := digestOf(bytesOf(params)), optimDigest(held.Optim)
	copy(mine[vParams:], pd[:])
	copy(mine[vOptim:], od[:])
	all := make([]int64, n*verdictW)
	if err := allreduce.AllGather(ctx, h.g, all, mine); err != nil {
		return nil, fmt.Errorf("heal: the replica check: %w", err)
	}
	v := func(r, k int) int64 { return all[r*verdictW+k] }
	for r := range n {
		if v(r, vCode) != 0 {
			return nil, fmt.Errorf("heal: rank %d (joining) refused the state: stripe %d of %d, sent by rank %d, failed its SHA-256 check; nothing was loaded",
				r, v(r, vStripe), len(h.senders), v(r, vSender))
		}
	}
	ref := h.senders[0]
	for r := range n {
		if !sameWords(all[r*verdictW+vParams:r*verdictW+vParams+4], all[ref*verdictW+vParams:ref*verdictW+vParams+4]) {
			return nil, fmt.Errorf("heal: replica check failed: rank %d's parameters are not bitwise rank %d's (SHA-256 differs): training must not resume", r, ref)
		}
		if !sameWords(all[r*verdictW+vOptim:r*verdictW+vOptim+4], all[ref*verdictW+vOptim:ref*verdictW+vOptim+4]) {
			return nil, fmt.Errorf("heal: replica check failed: rank %d's optimizer state is not bitwise rank %d's (SHA-256 differs): training must not resume", r, ref)
		}
	}
	if h.joiner {
		if !h.st.ParamsHeld {
			copy(h.st.Params, h.in.Params)
		}
		h.st.Position, h.st.Optim, h.st.RNG = h.in.Position, h.in.Optim, h.in.RNG
	}
	sent := make([]int64, n)
	for r := range n {
		sent[r] = v(r, vSent)
	}
	return sent, nil
}
