package doccheck

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Row is one row of a flag table.
type Row struct {
	Line    int      // 1-based line in the Markdown
	Flags   []string // the flags the first cell names, without the dash
	Default string   // the default cell, backticks removed
	Meaning string   // the third cell
}

// cellFlag is a flag name in a table's first cell: `-name`.
var cellFlag = regexp.MustCompile("`-([A-Za-z0-9][A-Za-z0-9-]*)`")

// FlagRows returns the rows of md's flag tables: tables whose header row's
// first two cells are "flag" and "default".
func FlagRows(md string) []Row {
	var rows []Row
	in := false
	for i, line := range strings.Split(md, "\n") {
		cells, ok := tableCells(line)
		switch {
		case !ok:
			in = false
		case len(cells) >= 2 && strings.EqualFold(cells[0], "flag") && strings.EqualFold(cells[1], "default"):
			in = true
		case in && len(cells) >= 2 && !strings.HasPrefix(cells[0], "---"):
			r := Row{Line: i + 1, Default: strings.ReplaceAll(cells[1], "`", "")}
			if len(cells) > 2 {
				r.Meaning = cells[2]
			}
			for _, m := range cellFlag.FindAllStringSubmatch(cells[0], -1) {
				r.Flags = append(r.Flags, m[1])
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// tableCells splits a Markdown table row into its trimmed cells; a "|"
// inside backticks or escaped as "\|" belongs to its cell.
func tableCells(line string) ([]string, bool) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") || len(line) < 2 {
		return nil, false
	}
	var cells []string
	var cur strings.Builder
	code := false
	body := line[1 : len(line)-1]
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\' && i+1 < len(body) && body[i+1] == '|':
			cur.WriteByte('|')
			i++
		case c == '`':
			code = !code
			cur.WriteByte(c)
		case c == '|' && !code:
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(cells, strings.TrimSpace(cur.String())), true
}

// CompareTable compares the flag table rows of the Markdown file named
// file with a command's flags and returns one message per difference,
// each saying which row to add, change or remove:
//   - every flag has a row, and every row's flags exist;
//   - a row naming k flags gives one default, or k separated by ", ";
//   - each default cell agrees with the flag's default (DefaultAgrees);
//   - the row of each flag in values mentions every value listed there
//     (say -transport's: every transport).
func CompareTable(file string, rows []Row, flags []Flag, values map[string][]string) []string {
	var msgs []string
	documented := map[string]bool{}
	for _, r := range rows {
		if len(r.Flags) == 0 {
			msgs = append(msgs, fmt.Sprintf("%s:%d: the flag table's row names no `-flag` in its first cell", file, r.Line))
			continue
		}
		for _, name := range r.Flags {
			documented[name] = true
		}
		defs := []string{r.Default}
		if len(r.Flags) > 1 {
			if defs = strings.Split(r.Default, ", "); len(defs) != len(r.Flags) {
				msgs = append(msgs, fmt.Sprintf("%s:%d: the row of %s gives %d defaults (%q) for %d flags: give one per flag, separated by \", \", or a row per flag",
					file, r.Line, dashed(r.Flags), len(defs), r.Default, len(r.Flags)))
				continue
			}
		}
		for i, name := range r.Flags {
			f, ok := Lookup(flags, name)
			if !ok {
				msgs = append(msgs, fmt.Sprintf("%s:%d: the row of -%s documents a flag the command does not have: remove it (or rename it to the flag's new name)", file, r.Line, name))
				continue
			}
			if ok, want := DefaultAgrees(f, defs[i]); !ok {
				fix := fmt.Sprintf("start with %q", want)
				if isZero(f) && usageDefault(f.Usage) != "" {
					fix = fmt.Sprintf("name each of %q", want)
				}
				msgs = append(msgs, fmt.Sprintf("%s:%d: -%s: the table's default %q disagrees with -h (%s): change the default cell to %s",
					file, r.Line, name, defs[i], describeDefault(f), fix))
			}
			for _, v := range values[name] {
				if !strings.Contains(r.Meaning, v) && !strings.Contains(r.Default, v) {
					msgs = append(msgs, fmt.Sprintf("%s:%d: -%s: the row does not mention the value %q (the command's values: %s): add it to the meaning cell",
						file, r.Line, name, v, strings.Join(values[name], ", ")))
				}
			}
		}
	}
	for _, f := range flags {
		if !documented[f.Name] {
			def := f.DefValue
			if d := usageDefault(f.Usage); isZero(f) && d != "" {
				def = d
			}
			msgs = append(msgs, fmt.Sprintf("%s: -%s has no row in the flag table: add \"| `-%s` | %s | %s |\"",
				file, f.Name, f.Name, def, firstSentence(f.Usage)))
		}
	}
	return msgs
}

// dashed renders flag names as "-a, -b".
func dashed(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "-" + n
	}
	return strings.Join(out, ", ")
}

// firstSentence is a usage's first clause, for a suggested row.
func firstSentence(usage string) string {
	if i := strings.IndexAny(usage, ";\n"); i >= 0 {
		usage = usage[:i]
	}
	return strings.ReplaceAll(usage, "|", `\|`)
}

// describeDefault is how -h shows f's default.
func describeDefault(f Flag) string {
	if !isZero(f) {
		return fmt.Sprintf("default %q", f.DefValue)
	}
	if d := usageDefault(f.Usage); d != "" {
		return fmt.Sprintf("zero value %q; its usage says \"default %s\"", f.DefValue, d)
	}
	return fmt.Sprintf("zero value %q", f.DefValue)
}

// isZero reports whether f's default is its type's zero value, which -h
// does not print as "(default X)".
func isZero(f Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return true
	}
	return false
}

// usageDefaultRE finds the default a usage text states: "default X" or
// "default: X" opening a clause (after "(", "; " or ". "), up to the
// clause's end.
var usageDefaultRE = regexp.MustCompile(`(?:^|\(|; |\. )default:? ([^;)]*?)(?:[;)]|\. |$)`)

// usageDefault is the default a usage text states ("" if none).
func usageDefault(usage string) string {
	m := usageDefaultRE.FindStringSubmatch(usage)
	if m == nil {
		return ""
	}
	return strings.TrimSpace(m[1])
}

// DefaultAgrees reports whether a table's default cell agrees with f, and
// what the cell should start with otherwise:
//   - a default other than the type's zero value: the cell starts with it
//     ("25", "auto", "30s (…)");
//   - a zero default whose usage states another ("default $RINGDDP_ALGO,
//     else auto", "default: the bundled real MNIST"): the cell names the
//     statement's first word that is not an article, its $VARIABLES and
//     the value after its "else" (keyWords);
//   - a plain zero default: the cell is empty, or starts with the zero
//     value ("0 (not given)", "false").
func DefaultAgrees(f Flag, cell string) (bool, string) {
	cell = strings.TrimSpace(cell)
	if !isZero(f) {
		return startsWithWord(cell, f.DefValue), f.DefValue
	}
	d := usageDefault(f.Usage)
	if d == "" {
		return cell == "" || (f.DefValue != "" && startsWithWord(cell, f.DefValue)), f.DefValue
	}
	need := keyWords(d)
	for _, w := range need {
		if !strings.Contains(cell, w) {
			return false, strings.Join(need, " … ")
		}
	}
	return true, strings.Join(need, " … ")
}

// startsWithWord reports whether s starts with w followed by nothing, a
// space or punctuation.
func startsWithWord(s, w string) bool {
	if !strings.HasPrefix(s, w) {
		return false
	}
	rest := s[len(w):]
	return rest == "" || strings.ContainsAny(rest[:1], " ,;(")
}

// keyWords are the words of a stated default a table cell must name, in
// order: its first word that is not an article, its $VARIABLES and the
// value after "else".
func keyWords(d string) []string {
	var out []string
	add := func(w string) {
		if w = strings.TrimSuffix(w, ":"); !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	fields := strings.FieldsFunc(d, func(r rune) bool { return r == ' ' || r == ',' })
	for _, w := range fields {
		if l := strings.ToLower(w); l != "the" && l != "a" && l != "an" {
			add(w)
			break
		}
	}
	for i, w := range fields {
		switch {
		case strings.HasPrefix(w, "$"):
			add(w)
		case w == "else" && i+1 < len(fields):
			add(fields[i+1])
		}
	}
	return out
}
