package allreduce

import "fmt"

// ChunkBounds returns the element range [lo, hi) of chunk i when count
// elements are split among n ranks: the first count%n chunks hold one element
// more than the rest, so sizes differ by at most one. Rank i owns chunk i,
// which is where ReduceScatter leaves rank i's result and where AllGather
// takes rank i's input. It panics if n < 1 or i is not in [0, n).
func ChunkBounds(count, n, i int) (lo, hi int) {
	if n < 1 || i < 0 || i >= n || count < 0 {
		panic(fmt.Sprintf("allreduce: ChunkBounds(count=%d, n=%d, i=%d) out of range", count, n, i))
	}
	q, r := count/n, count%n
	lo = i*q + min(i, r)
	hi = lo + q
	if i < r {
		hi++
	}
	return lo, hi
}

// Chunk is an element range [Lo, Hi).
type Chunk struct{ Lo, Hi int }

// Len is the number of elements in the chunk.
func (c Chunk) Len() int { return c.Hi - c.Lo }

// Chunks returns the layout of count elements over n ranks (see ChunkBounds).
func Chunks(count, n int) ([]Chunk, error) {
	if n < 1 {
		return nil, fmt.Errorf("allreduce: chunk layout over %d ranks: need at least 1", n)
	}
	if count < 0 {
		return nil, fmt.Errorf("allreduce: chunk layout of %d elements: negative count", count)
	}
	out := make([]Chunk, n)
	for i := range out {
		out[i].Lo, out[i].Hi = ChunkBounds(count, n, i)
	}
	return out, nil
}

// layoutOf turns per-rank element counts into chunks.
func layoutOf(counts []int) ([]Chunk, error) {
	out := make([]Chunk, len(counts))
	off := 0
	for i, n := range counts {
		if n < 0 {
			return nil, fmt.Errorf("%w: chunk count %d of rank %d is negative", ErrInvalid, n, i)
		}
		out[i] = Chunk{Lo: off, Hi: off + n}
		off += n
	}
	return out, nil
}
