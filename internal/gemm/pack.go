package gemm

// packA writes alpha·A[ic:ic+mc, pc:pc+kc] into dst as micro-panels of mr
// rows: panel q holds rows ic+q·mr … at dst[q·mr·kc + p·mr + i]. Rows past
// mc are zero, so the micro-kernel never needs an edge case.
func packA[T scalar](bl *blocking[T], dst []T, p *product[T], ic, mc, pc, kc int) {
	mr := bl.mr
	for q := 0; q*mr < mc; q++ {
		panel := dst[q*mr*kc : (q+1)*mr*kc]
		rows, row0 := min(mr, mc-q*mr), ic+q*mr
		if p.aTrans { // op(A)[i][l] = a[l*lda+i]
			copyRuns(panel, mr, p.a, pc*p.lda+row0, p.lda, rows, kc, p.alpha)
		} else { // op(A)[i][l] = a[i*lda+l]
			interleave(panel, mr, p.a, row0*p.lda+pc, p.lda, rows, kc, p.alpha)
		}
	}
}

// packB writes B[pc:pc+kc, jc:jc+nc] into dst as micro-panels of nr
// columns: panel q holds columns jc+q·nr … at dst[q·nr·kc + p·nr + j].
// Columns past nc are zero. (The copy multiplies by 1, which changes no
// value but a signalling NaN's quiet bit; the micro-kernel's multiply-add
// would quiet it anyway.)
func packB[T scalar](bl *blocking[T], dst []T, p *product[T], pc, kc, jc, nc int) {
	nr := bl.nr
	for q := 0; q*nr < nc; q++ {
		panel := dst[q*nr*kc : (q+1)*nr*kc]
		cols, col0 := min(nr, nc-q*nr), jc+q*nr
		if p.bTrans { // op(B)[l][j] = b[j*ldb+l]
			interleave(panel, nr, p.b, col0*p.ldb+pc, p.ldb, cols, kc, 1)
		} else { // op(B)[l][j] = b[l*ldb+j]
			copyRuns(panel, nr, p.b, pc*p.ldb+col0, p.ldb, cols, kc, 1)
		}
	}
}

// copyRuns fills a panel of kc steps of width values whose steps lie in
// src as contiguous runs: panel[l·width + r] = scale·src[first + l·ld + r]
// for r < count, and 0 for count ≤ r < width.
func copyRuns[T scalar](panel []T, width int, src []T, first, ld, count, kc int, scale T) {
	for l := 0; l < kc; l++ {
		run := src[first+l*ld : first+l*ld+count]
		out := panel[l*width : (l+1)*width]
		if scale == 1 {
			copy(out, run)
		} else {
			for r, v := range run {
				out[r] = scale * v
			}
		}
		clear(out[count:])
	}
}

// interleave fills a panel of kc steps of width values from count runs of
// src that are each contiguous in the step: panel[l·width + r] =
// scale·src[first + r·ld + l] for r < count, and 0 for count ≤ r < width.
// Four runs at a time, so that each step writes four neighbours.
func interleave[T scalar](panel []T, width int, src []T, first, ld, count, kc int, scale T) {
	r := 0
	for ; r+4 <= count; r += 4 {
		at := first + r*ld
		s0, s1 := src[at:at+kc], src[at+ld:at+ld+kc]
		s2, s3 := src[at+2*ld:at+2*ld+kc], src[at+3*ld:at+3*ld+kc]
		for l := range s0 {
			out := panel[l*width+r : l*width+r+4 : l*width+r+4]
			out[0], out[1], out[2], out[3] = scale*s0[l], scale*s1[l], scale*s2[l], scale*s3[l]
		}
	}
	for ; r < count; r++ {
		for l, v := range src[first+r*ld : first+r*ld+kc] {
			panel[l*width+r] = scale * v
		}
	}
	for ; r < width; r++ {
		for l := 0; l < kc; l++ {
			panel[l*width+r] = 0
		}
	}
}
