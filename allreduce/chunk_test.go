package allreduce_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
)

// chunkPairs is the (count, n) grid the chunk properties are checked on:
// every small pair exhaustively, then edge values and random large ones.
func chunkPairs() [][2]int {
	var pairs [][2]int
	for n := 1; n <= 20; n++ {
		for count := 0; count <= 3*n+2; count++ {
			pairs = append(pairs, [2]int{count, n})
		}
	}
	for _, n := range []int{1, 2, 3, 7, 8, 13, 16, 64, 100, 1000, 1 << 12} {
		for _, count := range []int{0, 1, n - 1, n, n + 1, 2*n - 1, 1000, 1<<20 + 3, 1<<31 - 1} {
			if count >= 0 {
				pairs = append(pairs, [2]int{count, n})
			}
		}
	}
	rng := rand.New(rand.NewPCG(42, 7))
	for range 200 {
		pairs = append(pairs, [2]int{rng.IntN(1 << 40), 1 + rng.IntN(1<<14)})
	}
	return pairs
}

func TestChunkBoundsTile(t *testing.T) {
	for _, p := range chunkPairs() {
		count, n := p[0], p[1]
		cs, err := allreduce.Chunks(count, n)
		require.NoError(t, err, "Chunks(%d, %d)", count, n)
		require.Len(t, cs, n, "Chunks(%d, %d)", count, n)
		next := 0
		maxLen, minLen := -1, count+1
		for i, c := range cs {
			lo, hi := allreduce.ChunkBounds(count, n, i)
			if c.Lo != lo || c.Hi != hi {
				t.Fatalf("Chunks(%d, %d)[%d] = %v, ChunkBounds = [%d, %d)", count, n, i, c, lo, hi)
			}
			if c.Lo != next {
				t.Fatalf("count=%d n=%d: chunk %d starts at %d, want %d (chunks must tile in order)", count, n, i, c.Lo, next)
			}
			if c.Len() < 0 || c.Len() != c.Hi-c.Lo {
				t.Fatalf("count=%d n=%d: chunk %d = %v has length %d", count, n, i, c, c.Len())
			}
			if i > 0 && c.Len() > cs[i-1].Len() {
				t.Fatalf("count=%d n=%d: chunk %d (%d elements) larger than chunk %d (%d): larger chunks must come first",
					count, n, i, c.Len(), i-1, cs[i-1].Len())
			}
			// The first count%n chunks are the larger ones.
			want := count / n
			if i < count%n {
				want++
			}
			if c.Len() != want {
				t.Fatalf("count=%d n=%d: chunk %d has %d elements, want %d", count, n, i, c.Len(), want)
			}
			maxLen, minLen = max(maxLen, c.Len()), min(minLen, c.Len())
			next = c.Hi
		}
		if next != count {
			t.Fatalf("count=%d n=%d: chunks end at %d, want %d", count, n, next, count)
		}
		if maxLen-minLen > 1 {
			t.Fatalf("count=%d n=%d: chunk sizes range %d..%d, want a spread of at most 1", count, n, minLen, maxLen)
		}
	}
}

func TestChunkBoundsEdges(t *testing.T) {
	// count = 0: every chunk is empty, at 0.
	for n := 1; n <= 9; n++ {
		cs, err := allreduce.Chunks(0, n)
		require.NoError(t, err)
		for i, c := range cs {
			require.Equal(t, allreduce.Chunk{Lo: 0, Hi: 0}, c, "n=%d chunk %d", n, i)
			require.Equal(t, 0, c.Len())
		}
	}
	// n = 1: one chunk, everything.
	for _, count := range []int{0, 1, 2, 1000, 1<<20 + 3} {
		cs, err := allreduce.Chunks(count, 1)
		require.NoError(t, err)
		require.Equal(t, []allreduce.Chunk{{Lo: 0, Hi: count}}, cs)
		lo, hi := allreduce.ChunkBounds(count, 1, 0)
		require.Equal(t, [2]int{0, count}, [2]int{lo, hi})
	}
	// count < n: the first count chunks hold one element, the rest none.
	cs, err := allreduce.Chunks(3, 5)
	require.NoError(t, err)
	require.Equal(t, []allreduce.Chunk{{0, 1}, {1, 2}, {2, 3}, {3, 3}, {3, 3}}, cs)
	cs, err = allreduce.Chunks(10, 4)
	require.NoError(t, err)
	require.Equal(t, []allreduce.Chunk{{0, 3}, {3, 6}, {6, 8}, {8, 10}}, cs)
}

func TestChunksInvalid(t *testing.T) {
	for _, n := range []int{0, -1, -100} {
		cs, err := allreduce.Chunks(10, n)
		require.Error(t, err, "Chunks(10, %d)", n)
		require.Nil(t, cs)
	}
	cs, err := allreduce.Chunks(-1, 4)
	require.Error(t, err, "Chunks(-1, 4)")
	require.Nil(t, cs)
}

func TestChunkBoundsPanics(t *testing.T) {
	for _, c := range []struct{ count, n, i int }{
		{10, 0, 0},  // n < 1
		{10, -1, 0}, // n < 1
		{10, 4, -1}, // i < 0
		{10, 4, 4},  // i >= n
		{10, 1, 1},  // i >= n
		{-1, 4, 0},  // count < 0
	} {
		t.Run(fmt.Sprintf("count=%d/n=%d/i=%d", c.count, c.n, c.i), func(t *testing.T) {
			require.Panics(t, func() { allreduce.ChunkBounds(c.count, c.n, c.i) })
		})
	}
}
