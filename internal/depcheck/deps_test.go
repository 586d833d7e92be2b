package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/ringddp/ringddp"

// forbidden lists, per package (relative to the module), the module
// packages it must not depend on, directly or not.
var forbidden = map[string][]string{
	"allreduce/cost":      {"allreduce", "allreduce/sim", "allreduce/transport", "allreduce/inproc", "allreduce/tcp", "allreduce/shm", "allreduce/mixed", "allreduce/rendezvous", "ddp", "zero", "optim", "models", "datasets"},
	"allreduce/calibrate": {"allreduce/sim", "allreduce/inproc", "allreduce/tcp", "allreduce/shm", "allreduce/mixed", "allreduce/allreducetest", "ddp", "zero", "optim", "models", "datasets"},
	"allreduce/transport": {"allreduce", "allreduce/inproc", "allreduce/tcp", "ddp", "zero", "optim", "models", "datasets"},
	"allreduce/inproc":    {"allreduce", "allreduce/tcp", "ddp", "zero", "optim", "models", "datasets"},
	"allreduce/tcp":       {"allreduce", "allreduce/inproc", "allreduce/sim", "ddp", "zero", "optim", "models", "datasets"},
	"allreduce/sim":       {"allreduce", "allreduce/inproc", "allreduce/tcp", "ddp", "zero", "optim", "models", "datasets"},
	"allreduce/shm":       {"allreduce", "allreduce/inproc", "allreduce/sim", "allreduce/tcp", "ddp", "zero", "optim", "models", "datasets"},
	"allreduce/mixed":     {"allreduce", "allreduce/inproc", "allreduce/sim", "ddp", "zero", "optim", "models", "datasets"},
	"allreduce":           {"allreduce/inproc", "allreduce/tcp", "allreduce/sim", "ddp", "zero", "optim", "models", "datasets", "internal/run/trainer"},
	"optim":               {"allreduce", "ddp", "zero", "models", "datasets"},
	"models":              {"allreduce", "ddp", "zero", "optim", "datasets"},
	"datasets":            {"allreduce", "ddp", "zero", "optim", "models"},
	"ddp":                 {"zero", "models", "datasets", "internal/run/trainer", "allreduce/inproc", "allreduce/tcp", "allreduce/sim"},
	"zero":                {"models", "datasets", "internal/run/trainer", "allreduce/inproc", "allreduce/tcp"},

	// The handshake sits below every protocol that authenticates, the
	// numeric vocabulary below everything; the rank runner above allreduce,
	// below the trainer and the commands.
	"allreduce/internal/handshake": {"allreduce", "allreduce/rendezvous", "allreduce/transport", "allreduce/tcp", "allreduce/shm", "ddp", "zero", "optim", "models", "datasets"},
	// Frame sealing, below the store (and any protocol that seals its
	// frames), imports nothing of the module.
	"allreduce/internal/frameseal": {"allreduce", "allreduce/rendezvous", "allreduce/transport", "allreduce/tcp", "allreduce/shm", "allreduce/internal/handshake", "internal/untrusted", "ddp", "zero", "optim", "models", "datasets"},
	"numeric":                      {"allreduce", "ddp", "zero", "optim", "models", "datasets", "internal/run/trainer"},
	"internal/vecops":              {"allreduce", "ddp", "zero", "optim", "models", "datasets", "internal/run/trainer"},
	"internal/half16":              {"numeric", "allreduce", "ddp", "zero", "optim", "models", "datasets", "internal/run/trainer"},
	"internal/run/rankrun":         {"allreduce/inproc", "allreduce/tcp", "allreduce/sim", "ddp", "zero", "optim", "models", "datasets", "internal/run/trainer"},

	// The byte-size vocabulary imports nothing of the module; the
	// sequential reference of the collectives only allreduce's types.
	"internal/bytesize": {"allreduce", "allreduce/cost", "allreduce/transport", "numeric", "ddp", "zero", "optim", "models", "datasets"},
	// Safe creation of output files imports nothing of the module.
	"internal/outfile": {"allreduce", "numeric", "ddp", "zero", "optim", "models", "datasets", "internal/safetensors", "internal/trace", "internal/run/trainer"},
	// The docs' checks know no package of the module: the commands' tests
	// hand them their flag sets.
	"internal/doccheck": {"allreduce", "allreduce/cost", "allreduce/transport", "numeric", "ddp", "zero", "optim", "models", "datasets", "internal/run/launch", "internal/run/trainer"},
	// The multi-host test bed drives the commands as processes and
	// imports nothing of the module.
	"internal/testbed":       {"allreduce", "allreduce/transport", "numeric", "ddp", "zero", "optim", "models", "datasets", "internal/run/launch", "internal/run/trainer"},
	"internal/run/reference": {"allreduce/inproc", "allreduce/tcp", "allreduce/sim", "allreduce/allreducetest", "ddp", "zero", "optim", "models", "datasets", "internal/run/trainer"},

	// Healing from peers sits below the trainer and the launcher: it moves
	// a replica's state over a group, knowing no model or wrapper.
	"internal/run/heal": {"ddp", "zero", "models", "datasets", "allreduce/inproc", "allreduce/tcp", "internal/run/trainer", "internal/run/launch"},
}

func TestDependenciesPointOneWay(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command")
	}
	for pkg, banned := range forbidden {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := map[string]bool{}
		for _, line := range strings.Fields(string(out)) {
			deps[line] = true
		}
		for _, b := range banned {
			if deps[module+"/"+b] {
				t.Errorf("%s depends on %s", pkg, b)
			}
		}
	}
}

// libraries lists packages (relative to the module) that must not link
// Go's testing package: the commands, and libraries a command links
// (cmd/bench's calibration, rank runner, reference and byte sizes), must
// not bring the test framework's flags and code along.
var libraries = []string{
	"allreduce/cost", "allreduce/calibrate", "allreduce",
	"internal/run/rankrun", "internal/run/reference", "internal/bytesize",
	"cmd/bench", "cmd/train", "bench/tcpfloor",
}

func TestLibrariesDoNotLinkTesting(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command")
	}
	for _, pkg := range libraries {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+"/"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, line := range strings.Fields(string(out)) {
			if line == "testing" {
				t.Errorf("%s links the testing package", pkg)
			}
		}
	}
}
