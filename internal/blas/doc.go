// Package blas selects the BLAS that gorgonia and tensor use. The default
// build computes matrix products with package gemm (Go assembly kernels
// for AVX-512 or AVX2+FMA, gonum's pure-Go BLAS elsewhere) and needs no
// cgo. Building with `-tags openblas` (Debian: apt-get install
// libopenblas-dev) links OpenBLAS through cgo instead, as a baseline. Both
// take the number of threads a product may use, so that in-process ranks,
// which already share the cores, do not oversubscribe them.
package blas
