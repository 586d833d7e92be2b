package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ringddp/ringddp/allreduce"
)

// The embedded PTX holds every entry point the code loads.
func TestPTXHasEveryKernel(t *testing.T) {
	have := ptxEntries(reducePTX)
	if len(have) == 0 {
		t.Fatal("no .entry in the embedded PTX")
	}
	for _, name := range kernelNames() {
		if !slices.Contains(have, name) {
			t.Errorf("kernel %s is loaded by the code but not in kernels/reduce.ptx (run go generate ./allreduce/cuda/)", name)
		}
	}
}

// The kernel table is complete: every (op, dtype) the device supports has
// a kernel, Avg of an integer type is refused like on the host, and the
// steps of Avg sum until the last.
func TestKernelTableComplete(t *testing.T) {
	for _, dt := range DTypes {
		for _, op := range Ops {
			name, err := kernelName(op, dt)
			if op == allreduce.Avg && !dt.IsFloat() {
				if !errors.Is(err, allreduce.ErrInvalid) {
					t.Errorf("Avg of %v: err %v, want ErrInvalid", dt, err)
				}
				continue
			}
			if err != nil || !strings.HasPrefix(name, "ringddp_") {
				t.Errorf("%v of %v: %q, %v", op, dt, name, err)
			}
			mid, _ := stepKernel(op, dt, false)
			last, _ := stepKernel(op, dt, true)
			if last != name {
				t.Errorf("%v of %v: last step %q, want %q", op, dt, last, name)
			}
			if op == allreduce.Avg {
				if sum, _ := kernelName(allreduce.Sum, dt); mid != sum {
					t.Errorf("Avg of %v: middle steps %q, want %q", dt, mid, sum)
				}
			} else if mid != name {
				t.Errorf("%v of %v: middle steps %q, want %q", op, dt, mid, name)
			}
		}
	}
	if _, err := kernelName(allreduce.ReduceOp(99), allreduce.Float32); err == nil {
		t.Error("kernelName accepts an unknown op")
	}
	names := kernelNames()
	if len(names) != 4*4+2+1 {
		t.Errorf("%d kernels, want 19: %v", len(names), names)
	}
}

// The PTX keeps the host's arithmetic: no flush-to-zero, no fused
// multiply-add (which would round once where the host rounds twice), no
// floating-point max/min instructions (which drop NaNs and pick either
// zero), and IEEE round-to-nearest division for Avg; PTX for compute_70.
func TestPTXExactArithmetic(t *testing.T) {
	if !regexp.MustCompile(`(?m)^\.target sm_70\b`).MatchString(reducePTX) {
		t.Error("PTX is not for sm_70 (go:generate's -arch=compute_70)")
	}
	for _, bad := range []string{".ftz", "fma.", "mad.f", "max.f32", "max.f64", "min.f32", "min.f64", "div.approx", "div.full"} {
		if strings.Contains(reducePTX, bad) {
			t.Errorf("PTX contains %q", bad)
		}
	}
	for _, want := range []string{"add.rn.f32", "add.rn.f64", "mul.rn.f32", "mul.rn.f64", "div.rn.f32", "div.rn.f64", "ld.global.v4", "ld.global.v2"} {
		if !strings.Contains(reducePTX, want) {
			t.Errorf("PTX lacks %q", want)
		}
	}
}

// deviceModel is kernels/reduce.cu's arithmetic, transliterated: what
// every kernel computes for one element, given that the GPU's IEEE
// operations agree with the host's on every non-NaN result and return some
// NaN otherwise. The test below holds it to the host kernel
// (allreduce.Combine) on special values, which is how the NaN rules in
// reduce.cu were derived; the cuda-tagged tests hold the GPU to the host.
func deviceModel32(op allreduce.ReduceOp, a, b float32, nranks int) float32 {
	isnan := func(u uint32) bool { return u&0x7fffffff > 0x7f800000 }
	fix := func(r float32) float32 {
		ua, ub := math.Float32bits(a), math.Float32bits(b)
		switch {
		case isnan(ua):
			return math.Float32frombits(ua | 0x00400000)
		case isnan(ub):
			return math.Float32frombits(ub | 0x00400000)
		case r != r:
			return math.Float32frombits(0x7fffffff) // the GPU's canonical NaN: replaced below
		}
		return r
	}
	canon := func(r float32) float32 {
		if math.Float32bits(r) == 0x7fffffff && !isnan(math.Float32bits(a)) && !isnan(math.Float32bits(b)) {
			return math.Float32frombits(0xffc00000)
		}
		return r
	}
	switch op {
	case allreduce.Sum:
		return canon(fix(a + b))
	case allreduce.Prod:
		return canon(fix(a * b))
	case allreduce.Max:
		if b > a || b != b {
			return b
		}
		return a
	case allreduce.Min:
		if b < a || b != b {
			return b
		}
		return a
	case allreduce.Avg:
		s := canon(fix(a + b))
		if isnan(math.Float32bits(s)) {
			return s
		}
		return s / float32(nranks)
	}
	panic(op)
}

func TestKernelNaNRulesMatchHost(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 1 << 14
	a := randomBytes(rng, allreduce.Float32, n)
	b := randomBytes(rng, allreduce.Float32, n)
	av, bv := elems[float32](a), elems[float32](b)
	for _, op := range Ops {
		hostOp := op
		if op == allreduce.Avg {
			hostOp = allreduce.Sum
		}
		out := make([]byte, len(a))
		if err := allreduce.Combine(allreduce.Float32, hostOp, out, a, b); err != nil {
			t.Fatal(err)
		}
		if op == allreduce.Avg {
			divideHost(allreduce.Float32, out, 3)
		}
		for i, want := range elems[float32](out) {
			got := deviceModel32(op, av[i], bv[i], 3)
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("%v(%#08x, %#08x): model %#08x, host %#08x", op,
					math.Float32bits(av[i]), math.Float32bits(bv[i]), math.Float32bits(got), math.Float32bits(want))
			}
		}
	}
}
