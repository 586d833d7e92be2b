//go:build !amd64

package vecops

// allVariants: other architectures have no assembly kernels yet; the
// scalar loops serve.
func allVariants() [1]Variant { return [1]Variant{goVariant()} }
