package doccheck

import (
	"bytes"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testFlags is a flag set with every kind of default the tables meet.
func testFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Int("ranks", 4, "number of ranks")
	fs.String("model", "mlp", "model: mlp or cnn")
	fs.Float64("momentum", 0, "SGD momentum (default 0.9 for sgd)")
	fs.String("wire", "", "frames' protection: auto, none; default $WIRE_ENV, else auto")
	fs.String("resume", "", "flags not given default to its values")
	fs.Duration("timeout", 0, "no-progress timeout (default 60s in process, 30s over tcp)")
	fs.Duration("rejoin", 30*time.Second, "how long to wait")
	fs.Bool("json", false, "JSON lines")
	fs.Bool("check", true, "check the result")
	fs.String("out", "", "write here")
	fs.String("empty-quoted", "a \"b\"", "a default with quotes")
	return fs
}

// ParseDefaults reads PrintDefaults' output back into what the flag set
// holds: names, defaults (quoted strings unquoted, zero values filled in,
// a usage's own "(default 0.9 for sgd)" left in the usage) and booleans.
func TestParseDefaultsMatchesFlagSet(t *testing.T) {
	fs := testFlags()
	var b bytes.Buffer
	fs.SetOutput(&b)
	fs.PrintDefaults()
	got, err := ParseDefaults("usage: x [flags]\n" + b.String())
	require.NoError(t, err)
	want := FromFlagSet(fs)
	require.Equal(t, len(want), len(got))
	for i := range want {
		require.Equal(t, want[i].Name, got[i].Name)
		require.Equal(t, want[i].DefValue, got[i].DefValue, "-%s", want[i].Name)
		require.Equal(t, want[i].IsBool, got[i].IsBool, "-%s", want[i].Name)
		require.Equal(t, want[i].Usage, got[i].Usage, "-%s", want[i].Name)
	}
}

func TestDefaultAgrees(t *testing.T) {
	flags := FromFlagSet(testFlags())
	for _, c := range []struct {
		flag, cell string
		ok         bool
	}{
		{"ranks", "4", true},
		{"ranks", "4 (one per core)", true},
		{"ranks", "40", false},
		{"ranks", "", false},
		{"model", "mlp", true},
		{"model", "cnn", false},
		{"momentum", "0.9 for sgd", true},
		{"momentum", "0", false}, // the usage says 0.9: the table must too
		{"wire", "$WIRE_ENV, else auto", true},
		{"wire", "none", false}, // the drift of issue 32
		{"wire", "$WIRE_ENV, else none", false},
		{"resume", "", true}, // "default to its values" is no stated default
		{"timeout", "0: 60s in process, 30s over tcp", true},
		{"timeout", "0", false},
		{"rejoin", "30s", true},
		{"rejoin", "30", false},
		{"json", "false", true},
		{"json", "", true},
		{"json", "true", false},
		{"check", "true", true},
		{"out", "", true},
		{"out", "results", false},
	} {
		f, ok := Lookup(flags, c.flag)
		require.True(t, ok)
		got, want := DefaultAgrees(f, c.cell)
		require.Equal(t, c.ok, got, "-%s with cell %q (want %q)", c.flag, c.cell, want)
	}
}

// CompareTable names every kind of drift with the row to change: a
// missing row, a row of a removed flag, a wrong default, a combined row
// with too few defaults and a missing value.
func TestCompareTableNamesTheRow(t *testing.T) {
	md := strings.Join([]string{
		"intro",
		"| flag | default | meaning |",
		"|---|---|---|",
		"| `-ranks` | 5 | ranks |",
		"| `-model` | mlp | `mlp` only, `a|b` in code |",
		"| `-gone` | 1 | a removed flag |",
		"| `-json`, `-check` | false | two flags, one default |",
		"| `-timeout`, `-rejoin` | 0: 60s in process, 30s, 30s | commas inside a default |",
		"",
		"| other | table |",
		"| `-out` | x |",
	}, "\n")
	rows := FlagRows(md)
	require.Len(t, rows, 5)
	require.Equal(t, 5, rows[1].Line)
	require.Equal(t, "`mlp` only, `a|b` in code", rows[1].Meaning)
	msgs := CompareTable("R.md", rows, FromFlagSet(testFlags()), map[string][]string{"model": {"mlp", "cnn"}})
	joined := strings.Join(msgs, "\n")
	for _, want := range []string{
		`R.md:4: -ranks: the table's default "5" disagrees with -h (default "4"): change the default cell to start with "4"`,
		`R.md:5: -model: the row does not mention the value "cnn"`,
		`R.md:6: the row of -gone documents a flag the command does not have`,
		`R.md:7: the row of -json, -check gives 1 defaults`,
		`R.md:8: the row of -timeout, -rejoin gives 3 defaults`,
		"R.md: -wire has no row in the flag table: add \"| `-wire` | $WIRE_ENV, else auto | frames' protection: auto, none |\"",
		"R.md: -out has no row in the flag table",
	} {
		require.Contains(t, joined, want)
	}
	require.NotContains(t, joined, "-momentum: the table", "no row: reported once, as missing")
	require.NotContains(t, joined, "-json has no row", "a row with a bad default count still documents its flags")
}

func TestShellLinesAndInvocations(t *testing.T) {
	md := strings.Join([]string{
		"```sh",
		"go run ./cmd/train -ranks 4   # a comment with -bogus",
		"export S=$(openssl rand -hex 32)",
		"RANK=0 WORLD_SIZE=2 go run -tags openblas ./cmd/train \\",
		"  -transport tcp -out 'a b'",
		"for m in a b; do ./bench -x $m -json; done",
		"mpirun -np 4 -x MASTER_ADDR=n0 -x S ./train -transport tcp  # as root add --allow-run-as-root",
		"cmd/train  cmd/bench   a directory listing, not a command",
		"go run ./cmd/other -y",
		"```",
		"```go",
		"go run ./cmd/train -never",
		"```",
		"```",
		"time go run ./cmd/bench && taskset -c 0 ./train -seed 2",
		"```",
	}, "\n")
	lines := ShellLines(md)
	require.Len(t, lines, 8)
	require.Equal(t, 4, lines[2].Line)
	require.Equal(t, "RANK=0 WORLD_SIZE=2 go run -tags openblas ./cmd/train -transport tcp -out 'a b'", lines[2].Text)
	require.Contains(t, lines[4].Comment, "--allow-run-as-root")
	invs := Invocations(lines, []string{"train", "bench"})
	var got []string
	for _, inv := range invs {
		got = append(got, inv.Command+" "+inv.Via+" "+strings.Join(inv.Env, ",")+" | "+strings.Join(inv.Args, " "))
	}
	require.Equal(t, []string{
		"train go run  | -ranks 4",
		"train go run RANK=0,WORLD_SIZE=2 | -transport tcp -out a b",
		"bench binary  | -x $m -json",
		"train mpirun  | -transport tcp",
		"bench go run  | ",
		"train binary  | -seed 2",
	}, got)
}

func TestCheckFlags(t *testing.T) {
	flags := FromFlagSet(testFlags())
	inv := func(args ...string) Invocation {
		return Invocation{Command: "x", Args: args, Line: Line{Line: 7, Text: "x " + strings.Join(args, " ")}}
	}
	require.Empty(t, CheckFlags("R.md", inv("-ranks", "4", "-json", "--model=cnn", "-check=false", "-h"), flags))
	// A value that looks like a flag is the flag's value, not a flag.
	require.Empty(t, CheckFlags("R.md", inv("-out", "-weird-name"), flags))
	msgs := CheckFlags("R.md", inv("-ranks", "4", "-bogus", "-out"), flags)
	require.Equal(t, []string{
		"R.md:7: `x -ranks 4 -bogus -out` passes -bogus, which x does not define (see x -h)",
		"R.md:7: `x -ranks 4 -bogus -out`: -out needs a value",
	}, msgs)
}

func TestUnexportedVars(t *testing.T) {
	md := strings.Join([]string{
		"```sh",
		"SECRET=$(openssl rand -hex 32)    # read by the command: must be exported",
		"export OK=1",
		"r=3                               # a shell variable, used below",
		"RANK=$r ./train",
		"A=1 B=2 ./train                   # the command's environment",
		"```",
		"```sh",
		"r=4                               # not used in its own block",
		"```",
	}, "\n")
	msgs := UnexportedVars("R.md", ShellLines(md))
	require.Equal(t, []string{
		"R.md:2: `SECRET=$(openssl rand -hex 32)` sets SECRET for this shell only: the commands after it do not see it; write `export SECRET=$(openssl rand -hex 32)`",
		"R.md:9: `r=4` sets r for this shell only: the commands after it do not see it; write `export r=4`",
	}, msgs)
}
