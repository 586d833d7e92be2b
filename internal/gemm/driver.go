package gemm

import (
	"sync"
	"unsafe"
)

// product is one call's operands after checking: C (m×n, row stride ldc)
// = alpha·op(A)·op(B) + C, where op(A) is m×k and op(B) is k×n. set says
// that C's old values do not count (beta was 0): the first KC block then
// stores instead of adding, and C is never read.
type product[T scalar] struct {
	aTrans, bTrans bool
	m, n, k        int
	alpha          T
	a              []T
	lda            int
	b              []T
	ldb            int
	c              []T
	ldc            int
	set            bool
}

// workspace is one thread's packed operands: the mc×kc block of A, the
// kc×nc panel of B and an mr×nr block of C for the edges.
type workspace[T scalar] struct {
	a, b, edge []T
}

// buffers hands out workspaces and takes them back, so that products
// allocate nothing once a few have run. Unlike a sync.Pool, it keeps them
// across garbage collections (a training step collects garbage often, and
// a fresh workspace costs a zeroed allocation). It keeps at most maxFree.
type buffers[T scalar] struct {
	mu   sync.Mutex
	free []*workspace[T]
}

// maxFree is the most idle workspaces a buffers keeps (one per thread of
// a product on the machines this runs on).
const maxFree = 64

// get returns a workspace large enough for p's blocks.
func (pool *buffers[T]) get(bl *blocking[T], p *product[T]) *workspace[T] {
	pool.mu.Lock()
	var w *workspace[T]
	if n := len(pool.free); n > 0 {
		w, pool.free = pool.free[n-1], pool.free[:n-1]
	}
	pool.mu.Unlock()
	if w == nil {
		w = &workspace[T]{}
	}
	kc := min(bl.kc, p.k)
	w.a = grow(w.a, ceilDiv(min(bl.mc, p.m), bl.mr)*bl.mr*kc)
	w.b = grow(w.b, kc*ceilDiv(min(bl.nc, p.n), bl.nr)*bl.nr)
	w.edge = grow(w.edge, bl.mr*bl.nr)
	return w
}

func (pool *buffers[T]) put(w *workspace[T]) {
	pool.mu.Lock()
	if len(pool.free) < maxFree {
		pool.free = append(pool.free, w)
	}
	pool.mu.Unlock()
}

func grow[T scalar](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// scaleC sets C = beta·C over its m×n elements; beta = 0 writes zeros
// (so NaN and Inf in C do not survive, as BLAS specifies).
func scaleC[T scalar](beta T, m, n int, c []T, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// multiply adds alpha·op(A)·op(B) to the rows [m0, m1) and columns
// [n0, n1) of C, with the loops of the package comment:
//
//	for each nc columns jc:
//	  for each kc steps pc:        pack B[pc:pc+kc, jc:jc+nc] if needed
//	    for each mc rows ic:       pack alpha·A[ic:ic+mc, pc:pc+kc] if needed
//	      for each nr columns jr:  one micro-panel of B, in L1
//	        for each mr rows ir:   micro-kernel on C[ic+ir, jc+jr]
//
// Every element of C receives its KC-blocks in increasing pc order
// whatever the bounds, which is what makes threads bitwise neutral.
func multiply[T scalar](bl *blocking[T], w *workspace[T], p *product[T], m0, m1, n0, n1 int) {
	for jc := n0; jc < n1; jc += bl.nc {
		nc := min(bl.nc, n1-jc)
		for pc := 0; pc < p.k; pc += bl.kc {
			kc := min(bl.kc, p.k-pc)
			bp := panelOfB(bl, w, p, pc, kc, jc, nc)
			for ic := m0; ic < m1; ic += bl.mc {
				mc := min(bl.mc, m1-ic)
				blk := blockOfA(bl, w, p, ic, mc, pc, kc)
				accumulate := !p.set || pc > 0
				macroKernel(bl, w, p, &blk, &bp, ic, mc, jc, nc, kc, accumulate)
			}
		}
	}
}

// aBlock says where the micro-kernel reads an mc×kc block of A: panel q
// (rows q·mr …) starts at panel(q); rsa and csa are the byte strides of a
// row and of a step of k. The last panel, when mc is not a multiple of mr,
// is always packed (with zero rows) so that no kernel reads past A.
type aBlock[T scalar] struct {
	base      []T // A itself, or the packed block
	panelStep int // elements from one panel to the next
	rsa, csa  int
	lastFull  int // panels [0, lastFull) read from base; the rest from edge
	edge      []T // the packed last panel
}

func (blk *aBlock[T]) panel(q int) *T {
	if q < blk.lastFull {
		return &blk.base[q*blk.panelStep]
	}
	return &blk.edge[0]
}

// blockOfA decides whether the micro-kernels read A where it is or packed.
// Packing costs a pass over A, scaled by alpha; it is needed when alpha is
// not 1 (the kernels do not scale), and pays when A's rows are a multiple
// of 4 KiB apart: the mr rows a kernel reads then fall in one set of the
// L1 cache (64 sets of 64-byte lines on the x86 cores of this decade) and
// evict each other. Partial panels are always packed.
// conflictStride is the distance between rows of A, in bytes, at which
// they compete for one L1 set.
const conflictStride = 4096

func blockOfA[T scalar](bl *blocking[T], w *workspace[T], p *product[T], ic, mc, pc, kc int) aBlock[T] {
	size := int(unsafe.Sizeof(T(0)))
	full := mc / bl.mr
	conflicts := (p.lda*size)%conflictStride == 0
	if p.alpha != 1 || conflicts {
		packA(bl, w.a, p, ic, mc, pc, kc)
		return aBlock[T]{base: w.a, panelStep: bl.mr * kc, rsa: size, csa: bl.mr * size,
			lastFull: ceilDiv(mc, bl.mr), edge: nil}
	}
	blk := aBlock[T]{lastFull: full}
	if p.aTrans { // op(A)[i][l] = a[l*lda+i]
		blk.base = p.a[pc*p.lda+ic:]
		blk.panelStep, blk.rsa, blk.csa = bl.mr, size, p.lda*size
	} else { // op(A)[i][l] = a[i*lda+l]
		blk.base = p.a[ic*p.lda+pc:]
		blk.panelStep, blk.rsa, blk.csa = bl.mr*p.lda, p.lda*size, size
	}
	if full*bl.mr < mc {
		packA(bl, w.a, p, ic+full*bl.mr, mc-full*bl.mr, pc, kc)
		blk.edge = w.a
	}
	return blk
}

// bPanel says where the micro-kernel reads a kc×nc panel of B: micro-panel
// q (columns q·nr …) starts at panel(q), its rows rsb bytes apart. The last
// micro-panel, when nc is not a multiple of nr, is always packed (with
// zero columns) so that no kernel reads past B.
type bPanel[T scalar] struct {
	base      []T // B itself, or the packed panel
	panelStep int // elements from one micro-panel to the next
	rsb       int
	lastFull  int // micro-panels [0, lastFull) read from base; the rest packed
	edge      []T // the packed last micro-panel
}

func (bp *bPanel[T]) panel(q int) *T {
	if q < bp.lastFull {
		return &bp.base[q*bp.panelStep]
	}
	return &bp.edge[0]
}

// panelOfB decides whether the micro-kernels read B where it is or packed.
// A row-major B (not transposed) is read in place, its nr-wide rows being
// contiguous, unless its rows are a multiple of 4 KiB apart (conflictStride:
// the kc rows of a micro-panel would share a few L1 sets). A transposed B
// is always packed: its nr values of a row are a column apart.
func panelOfB[T scalar](bl *blocking[T], w *workspace[T], p *product[T], pc, kc, jc, nc int) bPanel[T] {
	size := int(unsafe.Sizeof(T(0)))
	if p.bTrans || (p.ldb*size)%conflictStride == 0 {
		packB(bl, w.b, p, pc, kc, jc, nc)
		return bPanel[T]{base: w.b, panelStep: bl.nr * kc, rsb: bl.nr * size, lastFull: ceilDiv(nc, bl.nr)}
	}
	full := nc / bl.nr
	bp := bPanel[T]{base: p.b[pc*p.ldb+jc:], panelStep: bl.nr, rsb: p.ldb * size, lastFull: full}
	if full*bl.nr < nc {
		packB(bl, w.b, p, pc, kc, jc+full*bl.nr, nc-full*bl.nr)
		bp.edge = w.b
	}
	return bp
}

// macroKernel runs the micro-kernel over one block of A and panel of B.
// Blocks of C that the matrix cuts short go through w.edge.
func macroKernel[T scalar](bl *blocking[T], w *workspace[T], p *product[T], blk *aBlock[T], bp *bPanel[T], ic, mc, jc, nc, kc int, accumulate bool) {
	mr, nr := bl.mr, bl.nr
	acc := 0
	if accumulate {
		acc = 1
	}
	size := int(unsafe.Sizeof(T(0)))
	for jr := 0; jr < nc; jr += nr {
		bq := jr / nr
		b, rsb := bp.panel(bq), bp.rsb
		if bq >= bp.lastFull {
			rsb = nr * size
		}
		cols := min(nr, nc-jr)
		for ir := 0; ir < mc; ir += mr {
			q := ir / mr
			rsa, csa := blk.rsa, blk.csa
			if q >= blk.lastFull {
				rsa, csa = size, mr*size
			}
			rows := min(mr, mc-ir)
			at := (ic+ir)*p.ldc + jc + jr
			if rows == mr && cols == nr {
				bl.kernel(kc, blk.panel(q), rsa, csa, b, rsb, &p.c[at], p.ldc, acc)
				continue
			}
			bl.kernel(kc, blk.panel(q), rsa, csa, b, rsb, &w.edge[0], nr, 0)
			for i := 0; i < rows; i++ {
				dst := p.c[at+i*p.ldc : at+i*p.ldc+cols]
				src := w.edge[i*nr : i*nr+cols]
				if !accumulate {
					copy(dst, src)
					continue
				}
				for j := range dst {
					dst[j] += src[j]
				}
			}
		}
	}
}
