package main

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/internal/doccheck"
	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/run/trainer"
)

// trainFlags is the command's flag set as -h shows it, read at test time,
// with the defaults that come from the environment left unset.
func trainFlags(t *testing.T) []doccheck.Flag {
	t.Helper()
	t.Setenv(allreduce.AlgorithmEnv, "")
	t.Setenv(cost.ProfileEnv, "")
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	defineFlags(fs, trainer.DefaultConfig())
	return doccheck.FromFlagSet(fs)
}

// The flag table of cmd/train/README.md documents every flag of -h, with
// -h's default, and the values of the flags with a fixed set of them;
// every row's flag exists. A flag added, removed or given another default
// fails here, naming the row to add, remove or change.
func TestFlagTableMatchesFlagSet(t *testing.T) {
	md, err := os.ReadFile("README.md")
	require.NoError(t, err)
	values := map[string][]string{
		"transport":       strings.Split(launch.TransportNames(), ", "),
		"algo":            strings.Split(allreduce.AlgorithmNames(), ", "),
		"optim":           {trainer.OptimSGD, trainer.OptimAdam, trainer.OptimAdamW},
		"model":           {trainer.ModelMLP, trainer.ModelCNN},
		"dtype":           {trainer.Float32, trainer.Float64},
		"wire-protection": {string(tcp.WireAuto), string(tcp.WireNone), string(tcp.WireMAC), string(tcp.WireAEAD)},
	}
	rows := doccheck.FlagRows(string(md))
	require.NotEmpty(t, rows, "cmd/train/README.md has no flag table (| flag | default | meaning |)")
	for _, msg := range doccheck.CompareTable("cmd/train/README.md", rows, trainFlags(t), values) {
		t.Error(msg)
	}
}

// Every `go run ./cmd/train` and `./train` line of the README and the
// docs passes only flags the command defines, each flag that takes a
// value with one, and parses as typed: the same validation a run does
// before it trains (flags against each other, -resume's checkpoint, the
// launcher's environment), with the environment its line and its block's
// exports set. Lines that need what a test cannot give are only
// flag-checked: a checkpoint a previous command wrote, a data directory,
// another launcher's environment (mpirun, srun), a profile file.
func TestDocSnippetsUseRealFlags(t *testing.T) {
	flags := trainFlags(t)
	checked := 0
	docs, err := doccheck.Docs("../..")
	require.NoError(t, err)
	for _, doc := range docs {
		name := doc.Name
		lines := doccheck.ShellLines(doc.Text)
		for _, inv := range doccheck.Invocations(lines, []string{"train"}) {
			checked++
			msgs := doccheck.CheckFlags(name, inv, flags)
			for _, msg := range msgs {
				t.Error(msg)
			}
			if len(msgs) > 0 || !parsesHere(inv) {
				continue
			}
			t.Run(name+":"+strings.Join(inv.Args, " "), func(t *testing.T) {
				t.Chdir(t.TempDir())
				for _, k := range launcherEnv { // as a fresh shell has them: unset
					t.Setenv(k, "")
					require.NoError(t, os.Unsetenv(k))
				}
				for _, kv := range append(exportsOf(lines, inv.Line.Block), inv.Env...) {
					k, v, _ := strings.Cut(kv, "=")
					t.Setenv(k, v)
				}
				_, err := parseFlags(inv.Args, &strings.Builder{})
				require.NoError(t, err, "%s:%d: `%s` does not parse as typed", name, inv.Line.Line, inv.Line.Text)
			})
		}
	}
	require.Greater(t, checked, 10, "the snippets' train lines were not found")
}

// launcherEnv are the variables the command reads from a launcher or the
// user's shell, unset for parsing a snippet so that the test's own
// environment does not make a snippet pass that fails as typed.
var launcherEnv = []string{"RINGDDP_SECRET", "RINGDDP_INSECURE", "RINGDDP_WIRE_PROTECTION", "RINGDDP_ALGO", "RINGDDP_PROFILE",
	"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
	"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"}

// parsesHere reports whether an invocation can be parsed in a test: not
// under another launcher, and needing no file an earlier command wrote
// or a placeholder stands for.
func parsesHere(inv doccheck.Invocation) bool {
	if inv.Via != "go run" && inv.Via != "binary" {
		return false
	}
	for _, kv := range inv.Env {
		if strings.HasPrefix(kv, "RANK=") || strings.Contains(kv, "$") || strings.Contains(kv, "...") {
			return false
		}
	}
	for i, a := range inv.Args {
		switch strings.TrimLeft(a, "-") {
		case "resume", "data", "profile":
			if i+1 < len(inv.Args) && inv.Args[i+1] != "latest" {
				return false
			}
		}
		if strings.Contains(a, "$") || strings.Contains(a, "...") {
			return false
		}
	}
	return true
}

// exportsOf is what a block's export lines set (NAME=value), a value from
// a command substitution replaced by a stand-in of 64 hex digits (the
// secret's form).
func exportsOf(lines []doccheck.Line, block int) []string {
	var out []string
	for _, l := range lines {
		if l.Block != block {
			continue
		}
		for _, cmd := range doccheck.Commands(l.Text) {
			w := doccheck.Words(cmd)
			if len(w) < 2 || w[0] != "export" {
				continue
			}
			for _, kv := range w[1:] {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					continue
				}
				if strings.Contains(v, "$") || v == "..." {
					v = strings.Repeat("ab", 32)
				}
				out = append(out, k+"="+v)
			}
		}
	}
	return out
}

// The README's first command, cut to 5 steps, runs as typed and reports;
// -h prints every flag. (The whole 3 epochs run in CI's README step.)
func TestReadmeFirstCommandRuns(t *testing.T) {
	out, err := runTrain(t, "-h")
	require.NoError(t, err)
	for _, f := range trainFlags(t) {
		require.Contains(t, out, "  -"+f.Name, "-h")
	}
	if testing.Short() {
		t.Skip("trains 5 steps on the bundled MNIST (seconds): not with -short")
	}
	md, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	invs := doccheck.Invocations(doccheck.ShellLines(string(md)), []string{"train"})
	require.NotEmpty(t, invs)
	first := invs[0]
	t.Chdir(t.TempDir())
	out, err = runTrain(t, append(first.Args, "-max-steps", "5")...)
	require.NoError(t, err, "README.md:%d: `%s -max-steps 5`: %s", first.Line.Line, first.Line.Text, out)
	require.Contains(t, out, "stopped at -max-steps 5")
}
