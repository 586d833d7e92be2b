// Package blas selects the BLAS that gorgonia and tensor use. The default
// build uses gonum's pure-Go BLAS and needs no cgo. Building with
// `-tags openblas` (Debian: apt-get install libopenblas-dev) links
// OpenBLAS through gonum's netlib binding instead; Setup then also pins
// OpenBLAS to one thread unless OPENBLAS_NUM_THREADS is set, because
// in-process ranks already use every core and OpenBLAS threads would
// oversubscribe them.
package blas
