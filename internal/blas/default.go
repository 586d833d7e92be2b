//go:build !openblas

package blas

import (
	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Setup keeps gonum's BLAS (gorgonia's default) and returns its name.
func Setup() string { return "gonum" }

// implementation is the BLAS Setup selects.
func implementation() gblas.Float64 { return gonum.Implementation{} }
