package blas

import G "gorgonia.org/gorgonia"

// Setup makes gorgonia and tensor compute matrix products with this
// build's BLAS and returns its name for the run's report. The default
// build uses package gemm's fastest variant for this CPU (or the one
// RINGDDP_GEMM names; one the CPU cannot run is an error naming the ones
// it can), each product on at most threads goroutines (0: GOMAXPROCS),
// named e.g. "gemm avx512 ×1". The openblas build uses OpenBLAS on threads
// threads (0: one) unless OPENBLAS_NUM_THREADS is set, named "openblas".
func Setup(threads int) (string, error) {
	impl, name, err := implementation(threads)
	if err != nil {
		return "", err
	}
	G.Use(impl)
	return name, nil
}
