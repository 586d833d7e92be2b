// Package doccheck checks the project's Markdown against its commands: a
// command's flag table (a README table whose header row starts "flag |
// default") against the command's flag set, and the shell snippets of the
// README and the docs (their `go run ./cmd/X` and `./X` lines, their
// environment variables) against what runs as typed. The commands' tests
// call it with their own flag sets, so a flag added, renamed or given
// another default fails a test that names the table row to change.
//
// Vocabulary:
//   - Flag: one flag of a command's flag set, as -h prints it: its name,
//     its default (flag.Flag.DefValue) and its usage text.
//   - Row: one row of a flag table: the flags its first cell names (one,
//     or several separated by commas), its default cell and its meaning.
//   - Snippet line: one logical line of a shell code block (``` with
//     language sh, bash, shell or none), continuation lines joined.
//   - Invocation: a command run by a snippet line: `go run [build flags]
//     ./cmd/X args` or a binary `./X args` (also `X` after mpirun, srun
//     or a similar launcher), with the environment assignments before it.
//
// It imports nothing of the module and not package testing: tests turn
// what it reports into failures.
package doccheck

import (
	"bufio"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Flag is one flag of a command.
type Flag struct {
	Name     string
	DefValue string // the default as flag.Flag.DefValue renders it
	Usage    string
	IsBool   bool // takes no value (-name or -name=false)
}

// boolFlag is what package flag calls a boolean flag.
type boolFlag interface{ IsBoolFlag() bool }

// FromFlagSet lists fs's flags, sorted by name.
func FromFlagSet(fs *flag.FlagSet) []Flag {
	var out []Flag
	fs.VisitAll(func(f *flag.Flag) {
		b, ok := f.Value.(boolFlag)
		out = append(out, Flag{Name: f.Name, DefValue: f.DefValue, Usage: f.Usage, IsBool: ok && b.IsBoolFlag()})
	})
	return out
}

// defaultsHead is a flag's first line in flag.PrintDefaults' output:
// "  -name" and, for a flag that takes a value, its type word.
var defaultsHead = regexp.MustCompile(`^  -(\S+)(?: (\S+))?$`)

// trailingDefault is PrintDefaults' "(default X)" at the end of a usage.
var trailingDefault = regexp.MustCompile(` \(default (.*)\)$`)

// zeroOf is the zero default of a flag of PrintDefaults' type word, which
// PrintDefaults leaves out.
var zeroOf = map[string]string{"": "false", "int": "0", "uint": "0", "float": "0", "duration": "0s", "string": "", "value": ""}

// ParseDefaults reads the output of flag.PrintDefaults (what a command's
// -h prints after its usage line) back into flags: for commands whose flag
// set is built inside a function that also parses. Strings' defaults come
// unquoted; a default PrintDefaults leaves out is the type's zero value.
func ParseDefaults(text string) ([]Flag, error) {
	var out []Flag
	var types []string // PrintDefaults' type word, by flag
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if m := defaultsHead.FindStringSubmatch(line); m != nil {
			zero, known := zeroOf[m[2]]
			if !known {
				return nil, fmt.Errorf("doccheck: flag -%s: unknown type %q in %q", m[1], m[2], line)
			}
			out = append(out, Flag{Name: m[1], DefValue: zero, IsBool: m[2] == ""})
			types = append(types, m[2])
			continue
		}
		if !strings.HasPrefix(line, "    \t") || len(out) == 0 {
			continue // the usage line, or nothing of a flag
		}
		f := &out[len(out)-1]
		if f.Usage != "" {
			f.Usage += "\n"
		}
		f.Usage += strings.TrimPrefix(line, "    \t")
	}
	for i := range out {
		f := &out[i]
		if m := trailingDefault.FindStringSubmatchIndex(f.Usage); m != nil {
			if def, ok := typedDefault(types[i], f.Usage[m[2]:m[3]]); ok {
				f.DefValue, f.Usage = def, f.Usage[:m[0]]
			}
		}
	}
	return out, sc.Err()
}

// typedDefault is the default s that PrintDefaults appended to a flag of
// type word typ, and whether s is one: a string's is quoted, another
// type's parses as the type. A usage text that itself ends in "(default
// 0.9 for sgd)" is not one.
func typedDefault(typ, s string) (string, bool) {
	var err error
	switch typ {
	case "string":
		s, err = strconv.Unquote(s)
	case "int", "uint":
		_, err = strconv.ParseInt(s, 10, 64)
	case "float":
		_, err = strconv.ParseFloat(s, 64)
	case "duration":
		_, err = time.ParseDuration(s)
	case "":
		_, err = strconv.ParseBool(s)
	}
	return s, err == nil
}

// Lookup returns the flag named name.
func Lookup(flags []Flag, name string) (Flag, bool) {
	for _, f := range flags {
		if f.Name == name {
			return f, true
		}
	}
	return Flag{}, false
}
