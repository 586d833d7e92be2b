package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Line is one logical line of a shell code block.
type Line struct {
	Line    int    // 1-based line in the Markdown where it starts
	Text    string // continuation lines joined, the comments removed
	Comment string // the comments of its lines, joined
	Block   int    // the code block's index in the file
}

// shellLangs are the code blocks' languages read as shell; "" is a block
// without one.
var shellLangs = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true}

// ShellLines returns the logical lines of md's shell code blocks: a line
// ending in a backslash continues on the next; a "#" that starts a word
// starts a comment.
func ShellLines(md string) []Line {
	var out []Line
	block := -1
	inBlock, shell := false, false
	var cur *Line
	for i, raw := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(raw)
		if strings.HasPrefix(trimmed, "```") {
			if inBlock {
				inBlock, cur = false, nil
				continue
			}
			block++
			inBlock, shell = true, shellLangs[strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))]
			continue
		}
		if !inBlock || !shell {
			continue
		}
		text := strings.TrimRight(stripComment(raw), " \t")
		cont := strings.HasSuffix(text, "\\")
		text = strings.TrimSuffix(text, "\\")
		if cur == nil {
			cur = &Line{Line: i + 1, Block: block}
		}
		cur.Text = strings.TrimSpace(cur.Text + " " + strings.TrimSpace(text))
		cur.Comment = strings.TrimSpace(cur.Comment + " " + strings.TrimSpace(comment(raw)))
		if !cont {
			if cur.Text != "" {
				out = append(out, *cur)
			}
			cur = nil
		}
	}
	return out
}

// stripComment removes a shell comment: a "#" at the start of a word,
// outside quotes.
func stripComment(s string) string {
	var q quotes
	for i := 0; i < len(s); i++ {
		if !q.quoted(s[i]) && s[i] == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t') {
			return s[:i]
		}
	}
	return s
}

// quotes follows a line's shell quotes byte by byte.
type quotes struct{ open byte }

// quoted takes the line's next byte and reports whether it is a quote
// mark or inside quotes: no operator, comment or word break.
func (q *quotes) quoted(c byte) bool {
	switch {
	case q.open != 0:
		if c == q.open {
			q.open = 0
		}
		return true
	case c == '\'' || c == '"':
		q.open = c
		return true
	}
	return false
}

// comment is a line's comment: after an unquoted word-initial "#".
func comment(raw string) string {
	return strings.TrimPrefix(raw[len(stripComment(raw)):], "#")
}

// Words splits a shell command into words: quotes group and are removed,
// $(...) stays one word with what it holds.
func Words(s string) []string {
	var out []string
	var cur strings.Builder
	have := false
	var quote byte
	depth := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case depth > 0:
			cur.WriteByte(c)
			if c == '(' {
				depth++
			} else if c == ')' {
				depth--
			}
		case c == '$' && i+1 < len(s) && s[i+1] == '(':
			cur.WriteString("$(")
			depth, have = 1, true
			i++
		case c == '\'' || c == '"':
			quote, have = c, true
		case c == ' ' || c == '\t':
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// Commands splits a logical line into its simple commands, at ;, &&, ||,
// | and & outside quotes and $(...).
func Commands(s string) []string {
	var out []string
	var q quotes
	depth, start := 0, 0
	cut := func(i, n int) {
		out = append(out, strings.TrimSpace(s[start:i]))
		start = i + n
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case q.quoted(c):
		case c == '(':
			depth++
		case c == ')':
			depth--
		case depth > 0:
		case strings.HasPrefix(s[i:], "&&") || strings.HasPrefix(s[i:], "||"):
			cut(i, 2)
			i++
		case c == ';' || c == '|' || c == '&':
			cut(i, 1)
		}
	}
	cut(len(s), 0)
	var kept []string
	for _, c := range out {
		if c != "" {
			kept = append(kept, c)
		}
	}
	return kept
}

// assignment is a shell assignment word: NAME=value.
var assignment = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=(.*)$`)

// Invocation is a run of one of the project's commands in a snippet.
type Invocation struct {
	Line    Line
	Command string   // "train", "bench", ... (cmd/<Command>)
	Via     string   // "go run", "binary" (./train) or a launcher ("mpirun")
	Env     []string // NAME=value words before the command
	Args    []string // the command's arguments
}

// launchers run the program named after their own options (mpirun -np 4
// -x A ./train): their options are skipped up to the program.
var launchers = map[string]bool{"mpirun": true, "mpiexec": true, "srun": true}

// prefixes are words that run the rest of the command (do ./bench, time
// go run, taskset -c 0 ./train).
var prefixes = map[string]int{"do": 0, "then": 0, "time": 0, "exec": 0, "env": 0, "sudo": 0, "nohup": 0, "taskset": 2, "timeout": 1}

// Invocations finds the runs of the commands named in commands (their
// directories' base names under cmd/) in the lines.
func Invocations(lines []Line, commands []string) []Invocation {
	known := map[string]bool{}
	for _, c := range commands {
		known[c] = true
	}
	var out []Invocation
	for _, l := range lines {
		for _, cmd := range Commands(l.Text) {
			if inv, ok := invocation(Words(cmd), known); ok {
				inv.Line = l
				out = append(out, inv)
			}
		}
	}
	return out
}

// invocation reads one simple command's words as a run of a known
// command, if it is one.
func invocation(w []string, known map[string]bool) (Invocation, bool) {
	var inv Invocation
	for len(w) > 0 {
		if assignment.MatchString(w[0]) {
			inv.Env = append(inv.Env, w[0])
			w = w[1:]
			continue
		}
		if n, ok := prefixes[w[0]]; ok && len(w) > n {
			w = w[1+n:]
			continue
		}
		break
	}
	if len(w) == 0 {
		return inv, false
	}
	launcher := ""
	if launchers[w[0]] {
		launcher = w[0]
		w = w[1:]
		for len(w) > 0 && !known[binaryName(w[0])] {
			w = w[1:]
		}
		if len(w) == 0 {
			return inv, false
		}
	}
	switch {
	case len(w) >= 3 && w[0] == "go" && w[1] == "run":
		i := 2
		for i < len(w) && strings.HasPrefix(w[i], "-") { // go run's build flags
			if !goBoolFlags[strings.TrimLeft(w[i], "-")] && !strings.Contains(w[i], "=") {
				i++ // -tags openblas: the flag's value
			}
			i++
		}
		if i >= len(w) {
			return inv, false
		}
		name := strings.TrimPrefix(strings.TrimPrefix(w[i], "./"), "cmd/")
		if !strings.HasPrefix(w[i], "./cmd/") || !known[name] {
			return inv, false
		}
		inv.Command, inv.Via, inv.Args = name, "go run", w[i+1:]
	case known[binaryName(w[0])] && (strings.HasPrefix(w[0], "./") || strings.HasPrefix(w[0], "/") || launcher != ""):
		inv.Command, inv.Via, inv.Args = binaryName(w[0]), "binary", w[1:]
	default:
		return inv, false
	}
	if launcher != "" {
		inv.Via = launcher
	}
	return inv, true
}

// goBoolFlags are the go command's build flags that take no value.
var goBoolFlags = map[string]bool{"race": true, "msan": true, "asan": true, "cover": true, "a": true, "n": true, "x": true, "v": true, "work": true, "trimpath": true, "linkshared": true}

// binaryName is a program word's command name: ./train and bin/train are
// train.
func binaryName(word string) string {
	if i := strings.LastIndex(word, "/"); i >= 0 {
		return word[i+1:]
	}
	return word
}

// CheckFlags checks an invocation's flags against the command's: every
// -name (or -name=value) must be one of them; a flag that takes a value
// takes the next word unless given with "=". It returns one message per
// unknown flag or missing value.
func CheckFlags(file string, inv Invocation, flags []Flag) []string {
	var msgs []string
	for i := 0; i < len(inv.Args); i++ {
		a := inv.Args[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			continue // a positional word: the commands take none, which their own parse reports
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f, ok := Lookup(flags, name)
		switch {
		case name == "h" || name == "help":
		case !ok:
			msgs = append(msgs, fmt.Sprintf("%s:%d: `%s` passes -%s, which %s does not define (see %s -h)",
				file, inv.Line.Line, inv.Line.Text, name, inv.Command, inv.Command))
		case !f.IsBool && !hasValue:
			if i+1 >= len(inv.Args) {
				msgs = append(msgs, fmt.Sprintf("%s:%d: `%s`: -%s needs a value", file, inv.Line.Line, inv.Line.Text, name))
			}
			i++
		}
	}
	return msgs
}

// varRef finds $NAME and ${NAME} references.
var varRef = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)

// UnexportedVars checks md's shell blocks for a variable set alone on a
// line (NAME=value, no command after it) and neither exported nor used as
// $NAME later in its block: such a variable stays in the shell, and the
// commands run after it, which read it from their environment, do not
// see it. It returns one message per such line, naming the fix.
func UnexportedVars(file string, lines []Line) []string {
	var msgs []string
	for i, l := range lines {
		for _, cmd := range Commands(l.Text) {
			w := Words(cmd)
			if len(w) == 0 || w[0] == "export" || w[0] == "local" || w[0] == "readonly" {
				continue
			}
			var names []string
			for _, word := range w {
				m := assignment.FindStringSubmatch(word)
				if m == nil {
					names = nil // a command follows: the assignments are its environment
					break
				}
				names = append(names, m[1])
			}
			for _, name := range names {
				if !usedLater(lines[i+1:], l.Block, name) {
					msgs = append(msgs, fmt.Sprintf("%s:%d: `%s` sets %s for this shell only: the commands after it do not see it; write `export %s`",
						file, l.Line, l.Text, name, cmd))
				}
			}
		}
	}
	return msgs
}

// usedLater reports whether a line of block after these refers to $name.
func usedLater(lines []Line, block int, name string) bool {
	for _, l := range lines {
		if l.Block != block {
			return false
		}
		for _, m := range varRef.FindAllStringSubmatch(l.Text, -1) {
			if m[1] == name {
				return true
			}
		}
	}
	return false
}

// Doc is a Markdown file of the project: its path from the repository
// root and its text.
type Doc struct {
	Name, Text string
}

// docGlobs are the project's Markdown files with shell snippets, from the
// repository root.
var docGlobs = []string{"README.md", "docs/*.md", "cmd/*/README.md", "examples/*/README.md"}

// Docs reads the project's Markdown files with snippets (the README, the
// docs, the commands' and the examples' READMEs) under the repository
// root, in that order.
func Docs(root string) ([]Doc, error) {
	var out []Doc
	for _, glob := range docGlobs {
		names, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			b, err := os.ReadFile(name)
			if err != nil {
				return nil, err
			}
			rel, err := filepath.Rel(root, name)
			if err != nil {
				return nil, err
			}
			out = append(out, Doc{Name: filepath.ToSlash(rel), Text: string(b)})
		}
	}
	if len(out) == 0 || out[0].Name != "README.md" {
		return nil, fmt.Errorf("doccheck: no README.md under %s", root)
	}
	return out, nil
}
