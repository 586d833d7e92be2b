package gemm

import "sync"

// product is one call's operands after checking: C (m×n, row stride ldc)
// += alpha·op(A)·op(B), where op(A) is m×k and op(B) is k×n.
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
}

// workspace is one thread's packed operands: the mc×kc block of A, the
// kc×nc panel of B and an mr×nr block of C for the edges.
type workspace[T scalar] struct {
	a, b, edge []T
}

// buffers hands out workspaces and takes them back, so that a product
// allocates nothing once the pool is warm.
type buffers[T scalar] struct{ pool sync.Pool }

func (p *buffers[T]) get(bl *blocking[T]) *workspace[T] {
	w, _ := p.pool.Get().(*workspace[T])
	if w == nil {
		w = &workspace[T]{}
	}
	w.a = grow(w.a, bl.mc*bl.kc)
	w.b = grow(w.b, bl.kc*bl.nc)
	w.edge = grow(w.edge, bl.mr*bl.nr)
	return w
}

func (p *buffers[T]) put(w *workspace[T]) { p.pool.Put(w) }

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
//	for each nc columns jc:        pack B[pc:pc+kc, jc:jc+nc] (every pc)
//	  for each kc steps pc:
//	    for each mc rows ic:       pack alpha·A[ic:ic+mc, pc:pc+kc]
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
			packB(bl, w.b, p, pc, kc, jc, nc)
			for ic := m0; ic < m1; ic += bl.mc {
				mc := min(bl.mc, m1-ic)
				packA(bl, w.a, p, ic, mc, pc, kc)
				macroKernel(bl, w, p, ic, mc, jc, nc, kc)
			}
		}
	}
}

// macroKernel runs the micro-kernel over one packed block of A and panel
// of B. Blocks of C that the matrix cuts short go through w.edge.
func macroKernel[T scalar](bl *blocking[T], w *workspace[T], p *product[T], ic, mc, jc, nc, kc int) {
	mr, nr := bl.mr, bl.nr
	for jr := 0; jr < nc; jr += nr {
		bPanel := &w.b[jr*kc]
		cols := min(nr, nc-jr)
		for ir := 0; ir < mc; ir += mr {
			aPanel := &w.a[ir*kc]
			rows := min(mr, mc-ir)
			at := (ic+ir)*p.ldc + jc + jr
			if rows == mr && cols == nr {
				bl.kernel(kc, aPanel, bPanel, &p.c[at], p.ldc)
				continue
			}
			clear(w.edge)
			bl.kernel(kc, aPanel, bPanel, &w.edge[0], nr)
			for i := 0; i < rows; i++ {
				dst := p.c[at+i*p.ldc : at+i*p.ldc+cols]
				src := w.edge[i*nr : i*nr+cols]
				for j := range dst {
					dst[j] += src[j]
				}
			}
		}
	}
}
