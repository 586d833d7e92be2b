//go:build !amd64

package vecops

// Other architectures have no assembly kernels yet: the scalar loops serve.
func allAssemblyVariants() []Variant { return nil }

func assemblyVariants() []Variant { return nil }

func fastest() Variant { return goVariant }

func runnable(string) (Variant, bool) { return Variant{}, false }
