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
