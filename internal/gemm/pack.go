package gemm

// packA writes alpha·A[ic:ic+mc, pc:pc+kc] into dst as micro-panels of mr
// rows: panel q holds rows ic+q·mr … at dst[q·mr·kc + p·mr + i]. Rows past
// mc are zero, so the micro-kernel never needs an edge case.
func packA[T scalar](bl *blocking[T], dst []T, p *product[T], ic, mc, pc, kc int) {
	mr := bl.mr
	alpha := p.alpha
	for q := 0; q*mr < mc; q++ {
		panel := dst[q*mr*kc : (q+1)*mr*kc]
		rows := min(mr, mc-q*mr)
		row0 := ic + q*mr
		if p.aTrans {
			// op(A)[i][l] = a[l*lda+i]: each step of k is a contiguous run of rows.
			for l := 0; l < kc; l++ {
				src := p.a[(pc+l)*p.lda+row0 : (pc+l)*p.lda+row0+rows]
				out := panel[l*mr : l*mr+mr]
				for i, v := range src {
					out[i] = alpha * v
				}
				clear(out[rows:])
			}
			continue
		}
		// op(A)[i][l] = a[i*lda+l]: each row is contiguous in k; four rows
		// at a time, so that each step of k writes four neighbours.
		i := 0
		for ; i+4 <= rows; i += 4 {
			at := (row0+i)*p.lda + pc
			s0 := p.a[at : at+kc]
			s1 := p.a[at+p.lda : at+p.lda+kc]
			s2 := p.a[at+2*p.lda : at+2*p.lda+kc]
			s3 := p.a[at+3*p.lda : at+3*p.lda+kc]
			for l := range s0 {
				out := panel[l*mr+i : l*mr+i+4 : l*mr+i+4]
				out[0], out[1], out[2], out[3] = alpha*s0[l], alpha*s1[l], alpha*s2[l], alpha*s3[l]
			}
		}
		for ; i < rows; i++ {
			src := p.a[(row0+i)*p.lda+pc : (row0+i)*p.lda+pc+kc]
			for l, v := range src {
				panel[l*mr+i] = alpha * v
			}
		}
		for i := rows; i < mr; i++ {
			for l := 0; l < kc; l++ {
				panel[l*mr+i] = 0
			}
		}
	}
}

// packB writes B[pc:pc+kc, jc:jc+nc] into dst as micro-panels of nr
// columns: panel q holds columns jc+q·nr … at dst[q·nr·kc + p·nr + j].
// Columns past nc are zero.
func packB[T scalar](bl *blocking[T], dst []T, p *product[T], pc, kc, jc, nc int) {
	nr := bl.nr
	for q := 0; q*nr < nc; q++ {
		panel := dst[q*nr*kc : (q+1)*nr*kc]
		cols := min(nr, nc-q*nr)
		col0 := jc + q*nr
		if !p.bTrans {
			// op(B)[l][j] = b[l*ldb+j]: each step of k is a contiguous run of columns.
			for l := 0; l < kc; l++ {
				out := panel[l*nr : l*nr+nr]
				copy(out, p.b[(pc+l)*p.ldb+col0:(pc+l)*p.ldb+col0+cols])
				clear(out[cols:])
			}
			continue
		}
		// op(B)[l][j] = b[j*ldb+l]: each column is contiguous in k; four
		// columns at a time, so that each step of k writes four neighbours.
		j := 0
		for ; j+4 <= cols; j += 4 {
			at := (col0+j)*p.ldb + pc
			s0 := p.b[at : at+kc]
			s1 := p.b[at+p.ldb : at+p.ldb+kc]
			s2 := p.b[at+2*p.ldb : at+2*p.ldb+kc]
			s3 := p.b[at+3*p.ldb : at+3*p.ldb+kc]
			for l := range s0 {
				out := panel[l*nr+j : l*nr+j+4 : l*nr+j+4]
				out[0], out[1], out[2], out[3] = s0[l], s1[l], s2[l], s3[l]
			}
		}
		for ; j < cols; j++ {
			src := p.b[(col0+j)*p.ldb+pc : (col0+j)*p.ldb+pc+kc]
			for l, v := range src {
				panel[l*nr+j] = v
			}
		}
		for j := cols; j < nr; j++ {
			for l := 0; l < kc; l++ {
				panel[l*nr+j] = 0
			}
		}
	}
}
