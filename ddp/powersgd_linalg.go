package ddp

import "math"

// The small dense products of PowerSGD on row-major matrices: M is n×m,
// P is n×r, Q is m×r, r small. Each writes its whole output.

// matMul sets p = m·q.
func matMul[T Float](p, m, q []T, n, cols, r int) {
	clear(p)
	for i := range n {
		row, out := m[i*cols:(i+1)*cols], p[i*r:(i+1)*r]
		for j, v := range row {
			qj := q[j*r : (j+1)*r]
			for k := range out {
				out[k] += v * qj[k]
			}
		}
	}
}

// matTMul sets q = mᵀ·p.
func matTMul[T Float](q, m, p []T, n, cols, r int) {
	clear(q)
	for i := range n {
		row, pi := m[i*cols:(i+1)*cols], p[i*r:(i+1)*r]
		for j, v := range row {
			qj := q[j*r : (j+1)*r]
			for k := range qj {
				qj[k] += v * pi[k]
			}
		}
	}
}

// matMulT sets m = p·qᵀ.
func matMulT[T Float](m, p, q []T, n, cols, r int) {
	for i := range n {
		pi, row := p[i*r:(i+1)*r], m[i*cols:(i+1)*cols]
		for j := range row {
			qj := q[j*r : (j+1)*r]
			var s T
			for k, v := range pi {
				s += v * qj[k]
			}
			row[j] = s
		}
	}
}

// orthogonalize makes the columns of the rows×cols matrix a orthonormal
// by Gram-Schmidt, in column order: each column is divided by its norm
// (plus eps), then its projection is taken off every later column
// (PyTorch's _orthogonalize_gram_schmidt). A column of norm 0 with eps 0
// is left zero.
func orthogonalize[T Float](a []T, rows, cols int, eps float64) {
	for i := range cols {
		var ss T
		for r := range rows {
			v := a[r*cols+i]
			ss += v * v
		}
		norm := T(math.Sqrt(float64(ss))) + T(eps)
		if norm == 0 {
			for r := range rows {
				a[r*cols+i] = 0
			}
			continue
		}
		for r := range rows {
			a[r*cols+i] /= norm
		}
		for j := i + 1; j < cols; j++ {
			var dot T
			for r := range rows {
				dot += a[r*cols+i] * a[r*cols+j]
			}
			for r := range rows {
				a[r*cols+j] -= dot * a[r*cols+i]
			}
		}
	}
}
