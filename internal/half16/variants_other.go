//go:build !amd64

package half16

// allVariants: other architectures have no kernels yet; the callers'
// scalar code serves.
func allVariants() [1]Variant { return [1]Variant{goVariant()} }
