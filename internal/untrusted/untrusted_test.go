package untrusted

import "testing"

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"":               "",
		"wrong secret":   "wrong secret",
		"a\nb\x00c\x7fd": "a?b?c?d",
		"\xff\xfe ok":    "?? ok",
		"größe":          "größe",
	} {
		if got := Printable([]byte(in)); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven char", 10, "eleven ..."},
		{"a\x1b[2Jb", 10, "a?[2Jb"},
		{"größe größe", 8, "größe..."},
		{"abcdef", 1, "a..."},
	} {
		if got := Text(c.in, c.max); got != c.want {
			t.Errorf("Text(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}
