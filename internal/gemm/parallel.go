package gemm

import "sync"

// part is one thread's share of C: rows [m0, m1) and columns [n0, n1).
type part struct{ m0, m1, n0, n1 int }

// minPartWork is the fewest multiply-adds (m·n·k) worth a thread of its
// own: below it, starting and joining a goroutine costs more than it saves.
const minPartWork = 1 << 20

// split divides C among at most threads parts, in whole micro-kernel
// blocks (mr rows, nr columns), as a grid of tm×tn parts with the
// smallest largest part. k is never split.
func split(m, n, k, mr, nr, threads int) []part {
	threads = max(1, min(threads, m*n*k/minPartWork))
	unitsM, unitsN := ceilDiv(m, mr), ceilDiv(n, nr)
	bestM, bestN, bestLoad := 1, 1, unitsM*unitsN
	for tm := 1; tm <= threads; tm++ {
		tn := threads / tm
		if tm > unitsM || tn > unitsN {
			continue
		}
		load := ceilDiv(unitsM, tm) * ceilDiv(unitsN, tn)
		if load < bestLoad {
			bestM, bestN, bestLoad = tm, tn, load
		}
	}
	parts := make([]part, 0, bestM*bestN)
	for i := 0; i < bestM; i++ {
		m0, m1 := bounds(unitsM, bestM, i, mr, m)
		for j := 0; j < bestN; j++ {
			n0, n1 := bounds(unitsN, bestN, j, nr, n)
			parts = append(parts, part{m0, m1, n0, n1})
		}
	}
	return parts
}

// bounds gives part i of parts of units blocks of size unit, clipped to limit.
func bounds(units, parts, i, unit, limit int) (lo, hi int) {
	lo = min(limit, (units*i/parts)*unit)
	hi = min(limit, (units*(i+1)/parts)*unit)
	return lo, hi
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// run computes the product over the parts, one goroutine each after the
// first, which runs on the caller's.
func run[T scalar](bl *blocking[T], pool *buffers[T], p *product[T], parts []part) {
	var wg sync.WaitGroup
	for _, pt := range parts[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := pool.get(bl, p)
			multiply(bl, w, p, pt.m0, pt.m1, pt.n0, pt.n1)
			pool.put(w)
		}()
	}
	w := pool.get(bl, p)
	pt := parts[0]
	multiply(bl, w, p, pt.m0, pt.m1, pt.n0, pt.n1)
	pool.put(w)
	wg.Wait()
}
