package cuda

import (
	"os"
	oexec "os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPTXAssembles hands the embedded PTX to ptxas (the CUDA toolkit's
// assembler, the step the driver's JIT performs on the GPU) for Volta,
// Ampere and Hopper, and reads the machine code (SASS, nvdisasm):
// the only fused multiply-adds (FFMA, DFMA) may be in the Avg kernels,
// where they are the GPU's expansion of IEEE round-to-nearest division
// (div.rn, itself exact); a reduce step that the compiler fused would
// round once where the host rounds twice. It skips, saying so, where
// there is no ptxas: .ci/run unpacks Debian's nvidia-cuda-toolkit for it
// and puts it on PATH (or set RINGDDP_CUDA_BIN to its folder).
func TestPTXAssembles(t *testing.T) {
	ptxas, nvdisasm := cudaTool("ptxas"), cudaTool("nvdisasm")
	if ptxas == "" {
		t.Skip("no ptxas on PATH or in $RINGDDP_CUDA_BIN: the PTX is not assembled here (the driver's JIT will on the GPU)")
	}
	dir := t.TempDir()
	ptx := filepath.Join(dir, "reduce.ptx")
	if err := os.WriteFile(ptx, []byte(reducePTX), 0o600); err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`^\.text\.(\S+):`)
	fma := regexp.MustCompile(`\b[DF]FMA\b`)
	for _, arch := range []string{"sm_70", "sm_80", "sm_90"} {
		cubin := filepath.Join(dir, arch+".cubin")
		if out, err := oexec.Command(ptxas, "-arch="+arch, "-o", cubin, ptx).CombinedOutput(); err != nil {
			t.Fatalf("ptxas -arch=%s: %v\n%s", arch, err, out)
		}
		if nvdisasm == "" {
			t.Logf("%s: assembled; no nvdisasm, SASS not read", arch)
			continue
		}
		sass, err := oexec.Command(nvdisasm, cubin).CombinedOutput()
		if err != nil {
			t.Fatalf("nvdisasm (%s): %v\n%s", arch, err, sass)
		}
		cur, seen := "", map[string]bool{}
		for _, line := range strings.Split(string(sass), "\n") {
			if m := fn.FindStringSubmatch(line); m != nil {
				cur = m[1]
				seen[cur] = true
			}
			if fma.MatchString(line) && !strings.HasPrefix(cur, "ringddp_avg_") {
				t.Errorf("%s: %s has a fused multiply-add: %s", arch, cur, strings.TrimSpace(line))
			}
		}
		for _, k := range kernelNames() {
			if !seen[k] {
				t.Errorf("%s: no SASS for %s", arch, k)
			}
		}
	}
}

// cudaTool is the path of a CUDA toolkit program: in $RINGDDP_CUDA_BIN,
// else on PATH, else "".
func cudaTool(name string) string {
	if d := os.Getenv("RINGDDP_CUDA_BIN"); d != "" {
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	if p, err := oexec.LookPath(name); err == nil {
		return p
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
