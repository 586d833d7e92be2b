package doccheck

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// projectDocs are the project's Markdown files, by name.
func projectDocs(t *testing.T) map[string]string {
	t.Helper()
	docs, err := Docs("../..")
	require.NoError(t, err)
	out := map[string]string{}
	for _, d := range docs {
		out[d.Name] = d.Text
	}
	return out
}

// The commands read RINGDDP_SECRET and the launcher's variables from
// their environment: a snippet that sets one alone on a line must export
// it, or the commands after it run without it.
func TestProjectSnippetsExportTheirVariables(t *testing.T) {
	for name, md := range projectDocs(t) {
		for _, msg := range UnexportedVars(name, ShellLines(md)) {
			t.Error(msg)
		}
	}
}

// The README's commands run as typed on a fresh machine: a binary
// (./train) is built by a `go build -o` line before the line that runs it,
// and an mpirun line says what root needs (mpirun refuses to run as root
// without --allow-run-as-root).
func TestReadmeBinariesAndMpirun(t *testing.T) {
	md := projectDocs(t)["README.md"]
	lines := ShellLines(md)
	built := map[string]bool{}
	for _, l := range lines {
		for _, cmd := range Commands(l.Text) {
			w := Words(cmd)
			if len(w) >= 4 && w[0] == "go" && w[1] == "build" {
				for i := 2; i+1 < len(w); i++ {
					if w[i] == "-o" {
						built[binaryName(w[i+1])] = true
					}
				}
			}
		}
		for _, inv := range Invocations([]Line{l}, []string{"train", "bench"}) {
			if inv.Via != "go run" && !built[inv.Command] {
				t.Errorf("README.md:%d: `%s` runs ./%s, which no `go build -o %s ./cmd/%s` line before it builds",
					l.Line, l.Text, inv.Command, inv.Command, inv.Command)
			}
		}
		if w := Words(l.Text); len(w) > 0 && w[0] == "mpirun" &&
			!strings.Contains(l.Text, "--allow-run-as-root") && !strings.Contains(l.Comment, "--allow-run-as-root") {
			t.Errorf("README.md:%d: `%s` fails as root: add --allow-run-as-root, or say so in its comment", l.Line, l.Text)
		}
	}
}
