//go:build !openblas

package blas

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/ringddp/ringddp/internal/gemm"
)

// implementation is the BLAS Setup selects, and its name.
func implementation(threads int) (G.BLAS, string, error) {
	v, err := gemm.Best()
	if err != nil {
		return nil, "", err
	}
	impl := gemm.New(v, threads)
	return impl, fmt.Sprintf("gemm %s ×%d", impl.Name(), impl.Threads()), nil
}
