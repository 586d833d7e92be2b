package vecops

import "golang.org/x/sys/cpu"

// allVariants lists amd64's variants, fastest first, with whether this CPU
// runs each, and the scalar one last: the table that a new kernel joins.
// The AVX2 variant uses AVX for the arithmetic and AVX2 for the gathers;
// neither uses FMA. An array, so that Best allocates nothing.
func allVariants() [3]Variant {
	return [3]Variant{{Name: "avx512", Needs: "AVX-512F and AVX2", Runs: cpu.X86.HasAVX512F && cpu.X86.HasAVX2, K: typed{
		f32: kernels[float32]{lanes: 16,
			sgd: [3][2][2]sgdKernel[float32]{
				{{sgdPlain32AVX512, nil}, {sgdPlainDecay32AVX512, nil}},
				{{sgdFirst32AVX512, sgdFirstNesterov32AVX512}, {sgdFirstDecay32AVX512, sgdFirstDecayNesterov32AVX512}},
				{{sgdMomentum32AVX512, sgdMomentumNesterov32AVX512}, {sgdMomentumDecay32AVX512, sgdMomentumDecayNesterov32AVX512}},
			},
			adam:      [3]adamKernel[float32]{adam32AVX512, adamL232AVX512, adamDecoupled32AVX512},
			lut:       lut32AVX512,
			copyBlock: copyBlock32AVX512, addBlock: addBlock32AVX512,
			relu: relu32AVX512, reluGrad: reluGrad32AVX512, col2im: col2im32AVX512, maxPool: maxPool32AVX512, maxPoolGrad: maxPoolGrad32AVX512,
		},
		f64: kernels[float64]{lanes: 8,
			sgd: [3][2][2]sgdKernel[float64]{
				{{sgdPlain64AVX512, nil}, {sgdPlainDecay64AVX512, nil}},
				{{sgdFirst64AVX512, sgdFirstNesterov64AVX512}, {sgdFirstDecay64AVX512, sgdFirstDecayNesterov64AVX512}},
				{{sgdMomentum64AVX512, sgdMomentumNesterov64AVX512}, {sgdMomentumDecay64AVX512, sgdMomentumDecayNesterov64AVX512}},
			},
			adam:      [3]adamKernel[float64]{adam64AVX512, adamL264AVX512, adamDecoupled64AVX512},
			lut:       lut64AVX512,
			copyBlock: copyBlock64AVX512, addBlock: addBlock64AVX512,
			relu: relu64AVX512, reluGrad: reluGrad64AVX512, col2im: col2im64AVX512, maxPool: maxPool64AVX512, maxPoolGrad: maxPoolGrad64AVX512,
		},
	}}, {Name: "avx2", Needs: "AVX2", Runs: cpu.X86.HasAVX2, K: typed{
		f32: kernels[float32]{lanes: 8,
			sgd: [3][2][2]sgdKernel[float32]{
				{{sgdPlain32AVX2, nil}, {sgdPlainDecay32AVX2, nil}},
				{{sgdFirst32AVX2, sgdFirstNesterov32AVX2}, {sgdFirstDecay32AVX2, sgdFirstDecayNesterov32AVX2}},
				{{sgdMomentum32AVX2, sgdMomentumNesterov32AVX2}, {sgdMomentumDecay32AVX2, sgdMomentumDecayNesterov32AVX2}},
			},
			adam: [3]adamKernel[float32]{adam32AVX2, adamL232AVX2, adamDecoupled32AVX2},
			lut:  lut32AVX2,
		},
		f64: kernels[float64]{lanes: 4,
			sgd: [3][2][2]sgdKernel[float64]{
				{{sgdPlain64AVX2, nil}, {sgdPlainDecay64AVX2, nil}},
				{{sgdFirst64AVX2, sgdFirstNesterov64AVX2}, {sgdFirstDecay64AVX2, sgdFirstDecayNesterov64AVX2}},
				{{sgdMomentum64AVX2, sgdMomentumNesterov64AVX2}, {sgdMomentumDecay64AVX2, sgdMomentumDecayNesterov64AVX2}},
			},
			adam: [3]adamKernel[float64]{adam64AVX2, adamL264AVX2, adamDecoupled64AVX2},
			lut:  lut64AVX2,
		},
	}}, goVariant()}
}
