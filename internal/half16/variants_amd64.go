package half16

import "golang.org/x/sys/cpu"

// allVariants lists amd64's variants, fastest first, with whether this CPU
// runs each, and the go one last. The AVX-512 kernels need AVX-512F and
// AVX-512BW (VPMOVZXWD on ZMM); the AVX2 ones need F16C for the float16
// conversions. An array, so that Best allocates nothing.
func allVariants() [3]Variant {
	return [3]Variant{
		{Name: "avx512", Needs: "AVX-512F and AVX-512BW", Runs: cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW, K: kernels{lanes: 16,
			decode: [2]func(*float32, *uint16, int){decodeF16AVX512, decodeBF16AVX512},
			encode: [2]func(*uint16, *float32, int){encodeF16AVX512, encodeBF16AVX512},
			combine: [2][numOps]func(out, a, b *uint16, n int){
				{combineF16AddAVX512, combineF16MulAVX512, combineF16MaxAVX512, combineF16MinAVX512},
				{combineBF16AddAVX512, combineBF16MulAVX512, combineBF16MaxAVX512, combineBF16MinAVX512},
			},
			divide: [2]func(*uint16, int, float32){divideF16AVX512, divideBF16AVX512},
		}},
		{Name: "avx2", Needs: "AVX2 and F16C", Runs: cpu.X86.HasAVX2 && cpu.X86.HasF16C, K: kernels{lanes: 8,
			decode: [2]func(*float32, *uint16, int){decodeF16AVX2, decodeBF16AVX2},
			encode: [2]func(*uint16, *float32, int){encodeF16AVX2, encodeBF16AVX2},
			combine: [2][numOps]func(out, a, b *uint16, n int){
				{combineF16AddAVX2, combineF16MulAVX2, combineF16MaxAVX2, combineF16MinAVX2},
				{combineBF16AddAVX2, combineBF16MulAVX2, combineBF16MaxAVX2, combineBF16MinAVX2},
			},
			divide: [2]func(*uint16, int, float32){divideF16AVX2, divideBF16AVX2},
		}},
		goVariant(),
	}
}
