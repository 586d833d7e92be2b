// Package untrusted helps report bytes that came from the network or a file.
package untrusted

// Printable renders b as text safe to put in an error message: control
// characters, DEL and invalid UTF-8 become '?'.
func Printable(b []byte) string {
	out := make([]rune, 0, len(b))
	for _, r := range string(b) {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			r = '?'
		}
		out = append(out, r)
	}
	return string(out)
}

// Text is Printable(s) cut to at most max runes, "..." marking a cut: a
// text from elsewhere (another host's failure reason, say) that a message
// quotes.
func Text(s string, max int) string {
	p := []rune(Printable([]byte(s)))
	if max < 4 {
		max = 4
	}
	if len(p) <= max {
		return string(p)
	}
	return string(p[:max-3]) + "..."
}
