package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/internal/doccheck"
	"github.com/ringddp/ringddp/internal/run/launch"
)

// benchFlags is the command's flag set as -h prints it (parseConfig
// builds and parses it in one), read at test time, with the defaults that
// come from the environment left unset.
func benchFlags(t *testing.T) []doccheck.Flag {
	t.Helper()
	t.Setenv(allreduce.AlgorithmEnv, "")
	t.Setenv(cost.ProfileEnv, "")
	var help strings.Builder
	cfg, err := parseConfig([]string{"-h"}, &help)
	require.NoError(t, err)
	require.Nil(t, cfg)
	flags, err := doccheck.ParseDefaults(help.String())
	require.NoError(t, err)
	require.Greater(t, len(flags), 20, "-h:\n%s", help.String())
	return flags
}

// The flag table of cmd/bench/README.md documents every flag of -h, with
// -h's default, and -transport's and -algo's every value; every row's
// flag exists. A flag added, removed or given another default fails here,
// naming the row to add, remove or change.
func TestFlagTableMatchesFlagSet(t *testing.T) {
	md, err := os.ReadFile("README.md")
	require.NoError(t, err)
	values := map[string][]string{
		"transport":       append(strings.Split(launch.TransportNames(), ", "), simTransport),
		"algo":            strings.Split(allreduce.AlgorithmNames(), ", "),
		"op":              strings.Split(names(collectives), ", "),
		"dtype":           strings.Split(names(dtypes), ", "),
		"redop":           strings.Split(names(redops), ", "),
		"wire-protection": {string(tcp.WireAuto), string(tcp.WireNone), string(tcp.WireMAC), string(tcp.WireAEAD)},
	}
	rows := doccheck.FlagRows(string(md))
	require.NotEmpty(t, rows, "cmd/bench/README.md has no flag table (| flag | default | meaning |)")
	for _, msg := range doccheck.CompareTable("cmd/bench/README.md", rows, benchFlags(t), values) {
		t.Error(msg)
	}
}

// Every `go run ./cmd/bench` and `./bench` line of the README and the
// docs passes only flags the command defines, each flag that takes a
// value with one; those that need nothing an earlier command wrote or a
// launcher's environment parse as typed (the validation a run does
// before it starts any rank).
func TestDocSnippetsUseRealFlags(t *testing.T) {
	flags := benchFlags(t)
	docs, err := doccheck.Docs("../..")
	require.NoError(t, err)
	checked := 0
	for _, doc := range docs {
		name := doc.Name
		for _, inv := range doccheck.Invocations(doccheck.ShellLines(doc.Text), []string{"bench"}) {
			checked++
			msgs := doccheck.CheckFlags(name, inv, flags)
			for _, msg := range msgs {
				t.Error(msg)
			}
			if len(msgs) > 0 || !parsesAlone(inv) {
				continue
			}
			t.Run(name+":"+strings.Join(inv.Args, " "), func(t *testing.T) {
				t.Chdir(t.TempDir())
				_, err := parseConfig(inv.Args, &strings.Builder{})
				require.NoError(t, err, "%s:%d: `%s` does not parse as typed", name, inv.Line.Line, inv.Line.Text)
			})
		}
	}
	require.Greater(t, checked, 10, "the snippets' bench lines were not found")
}

// parsesAlone reports whether an invocation parses without what a test
// cannot give: a launcher's environment, a file an earlier command wrote
// (-profile, -compare), a placeholder, another build's transport.
func parsesAlone(inv doccheck.Invocation) bool {
	if (inv.Via != "go run" && inv.Via != "binary") || len(inv.Env) > 0 {
		return false
	}
	for i, a := range inv.Args {
		switch strings.TrimLeft(a, "-") {
		case "profile", "compare", "nnodes":
			return false
		case "transport":
			if i+1 < len(inv.Args) && inv.Args[i+1] == "cuda" {
				return false
			}
		}
		if strings.ContainsAny(a, "$<>") || strings.Contains(a, "...") {
			return false
		}
	}
	return true
}

// cmd/bench/README.md's lines that run in process run as typed, cut to
// sizes up to 1 KiB and one iteration (flags given later win): each gives
// its table with no wrong element.
func TestReadmeBenchLinesRun(t *testing.T) {
	docs, err := doccheck.Docs("../..")
	require.NoError(t, err)
	t.Chdir(t.TempDir()) // -plot's file
	ran := 0
	for _, doc := range docs {
		if doc.Name != "cmd/bench/README.md" {
			continue
		}
		for _, inv := range doccheck.Invocations(doccheck.ShellLines(doc.Text), []string{"bench"}) {
			if !parsesAlone(inv) || slices.ContainsFunc(inv.Args, func(a string) bool {
				// Processes (run by the tcp and shm tests), a calibration
				// (seconds of sweeps), predictions only, or 1024 simulated
				// ranks (sim_test.go runs them): not here.
				return a == "tcp" || a == "shm" || a == "auto" || a == "1024" || strings.HasPrefix(a, "-calibrate") || a == "-explain"
			}) {
				continue
			}
			out, err := runBench(t, append(inv.Args, "-min", "8", "-max", "1K", "-iters", "1", "-warmup", "0")...)
			require.NoError(t, err, "%s:%d: `%s`: %s", doc.Name, inv.Line.Line, inv.Line.Text, out)
			if slices.Contains(inv.Args, "-json") {
				for _, r := range jsonRows(t, out) {
					require.Zero(t, num(t, r, "wrong"), "%s:%d: %v", doc.Name, inv.Line.Line, r)
				}
			} else {
				require.Contains(t, out, "# wrong elements    : 0 OK", "%s:%d", doc.Name, inv.Line.Line)
			}
			ran++
		}
	}
	require.Greater(t, ran, 3, "cmd/bench/README.md's lines were not found")
}
