package gemm

import "golang.org/x/sys/cpu"

// assemblyVariants lists every assembly variant of amd64, fastest first,
// with whether this CPU (and its OS) runs it: the table that a new kernel
// joins. Block sizes: the kc×nr micro-panel of B stays in L1 (32
// KiB at kc = 256 for the AVX-512 kernels), the mc×kc block of A in L2,
// the kc×nc panel of B in L3.
func assemblyVariants() []Variant {
	return []Variant{
		{Name: "avx512", Needs: "AVX-512F", Runs: cpu.X86.HasAVX512F, K: kernels{
			f32:   blocking[float32]{kernel: sgemmKernel14x32AVX512, mr: 14, nr: 32, kc: 256, mc: 14 * 24, nc: 32 * 128},
			f64:   blocking[float64]{kernel: dgemmKernel14x16AVX512, mr: 14, nr: 16, kc: 256, mc: 14 * 12, nc: 16 * 256},
			few32: blocking[float32]{kernel: sgemmKernel8x32AVX512, mr: 8, nr: 32, kc: 256, mc: 8 * 3, nc: 32 * 128},
			few64: blocking[float64]{kernel: dgemmKernel8x16AVX512, mr: 8, nr: 16, kc: 256, mc: 8 * 3, nc: 16 * 256},
		}},
		{Name: "avx2", Needs: "AVX2 and FMA", Runs: cpu.X86.HasAVX2 && cpu.X86.HasFMA, K: kernels{
			f32:   blocking[float32]{kernel: sgemmKernel6x16AVX2, mr: 6, nr: 16, kc: 256, mc: 6 * 32, nc: 16 * 256},
			f64:   blocking[float64]{kernel: dgemmKernel6x8AVX2, mr: 6, nr: 8, kc: 256, mc: 6 * 16, nc: 8 * 512},
			few32: blocking[float32]{kernel: sgemmKernel4x16AVX2, mr: 4, nr: 16, kc: 256, mc: 4 * 6, nc: 16 * 256},
			few64: blocking[float64]{kernel: dgemmKernel4x8AVX2, mr: 4, nr: 8, kc: 256, mc: 4 * 6, nc: 8 * 512},
		}},
	}
}
