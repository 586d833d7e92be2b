//go:build openblas

package blas

// baselines is OpenBLAS on one thread.
func baselines() []contender {
	impl, _, _ := implementation(1)
	return []contender{{"openblas", impl.(openBLAS)}}
}
