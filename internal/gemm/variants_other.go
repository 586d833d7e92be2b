//go:build !amd64

package gemm

// Other architectures have no assembly kernels yet: gonum's BLAS serves.
func assemblyVariants() []Variant { return nil }
