//go:build !openblas

package blas

// baselines is empty without the openblas build tag.
func baselines() []contender { return nil }
