//go:build !openblas

package blas

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/internal/gemm"
)

// Setup makes gorgonia and tensor compute matrix products with package
// gemm's fastest variant for this CPU (or the one RINGDDP_GEMM names),
// each product on at most threads goroutines (0: GOMAXPROCS), and returns
// its name for the run's report, e.g. "gemm avx512 ×1". A RINGDDP_GEMM this
// CPU cannot run is an error naming the ones it can.
func Setup(threads int) (string, error) {
	impl, name, err := implementation(threads)
	if err != nil {
		return "", err
	}
	G.Use(impl)
	return name, nil
}

// implementation is the BLAS Setup selects, and its name.
func implementation(threads int) (G.BLAS, string, error) {
	v, err := gemm.Best()
	if err != nil {
		return nil, "", err
	}
	impl := gemm.New(v, threads)
	return impl, fmt.Sprintf("gemm %s ×%d", impl.Name(), impl.Threads()), nil
}
