package cuda

import (
	"bytes"
	"math/rand/v2"
	"os"
	oexec "os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestKernelSourceOnHost compiles kernels/reduce.cu as host C++
// (kernels/host: shim.h stands in for CUDA's intrinsics, one thread runs
// each kernel) and checks every kernel's arithmetic, on special values
// (NaN payloads quiet and signalling, ±0, ±Inf and Inf-Inf, denormals)
// and on both its vector (aligned) and scalar (misaligned) paths, bitwise
// against the host ring's combine (allreduce.Combine, Avg's division).
// The PTX is the same source compiled by nvcc; TestPTXExactArithmetic and
// TestPTXAssembles check what nvcc and ptxas made of it.
func TestKernelSourceOnHost(t *testing.T) {
	cxx := os.Getenv("CXX")
	if cxx == "" {
		for _, c := range []string{"g++", "c++", "clang++"} {
			if p, err := oexec.LookPath(c); err == nil {
				cxx = p
				break
			}
		}
	}
	if cxx == "" {
		t.Skip("no C++ compiler (g++, c++, clang++ or $CXX): the kernels' source is not checked on the host")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "reduce-host")
	build := oexec.Command(cxx, "-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math", "-Wall", "-Wno-unknown-pragmas",
		"-o", bin, filepath.Join("kernels", "host", "main.cc"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("compiling reduce.cu for the host with %s: %v\n%s", cxx, err, out)
	}
	rng := rand.New(rand.NewPCG(11, 12))
	const n, nranks = 1003, 3
	for _, dt := range DTypes {
		for _, op := range Ops {
			name, err := kernelName(op, dt)
			if err != nil {
				continue
			}
			for shift := 0; shift <= 1; shift++ {
				a, b := randomBytes(rng, dt, n), randomBytes(rng, dt, n)
				got := runHostKernel(t, bin, dir, name, n, nranks, shift, a, b)
				want := make([]byte, len(a))
				if err := hostKernel(op, dt, want, a, b, nranks); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					es := dt.Size()
					i := firstDiff(got, want) / es
					t.Errorf("%s shift %d: element %d: kernel % x, host % x (a % x, b % x)", name, shift, i,
						got[i*es:(i+1)*es], want[i*es:(i+1)*es], a[i*es:(i+1)*es], b[i*es:(i+1)*es])
				}
			}
		}
	}
}

func runHostKernel(t *testing.T, bin, dir, name string, n, nranks, shift int, a, b []byte) []byte {
	t.Helper()
	pa, pb, po := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "out")
	for p, data := range map[string][]byte{pa: a, pb: b} {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := oexec.Command(bin, name, strconv.Itoa(n), strconv.Itoa(nranks), strconv.Itoa(shift), pa, pb, po)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	got, err := os.ReadFile(po)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
