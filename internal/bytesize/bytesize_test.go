package bytesize

import "testing"

func TestFormat(t *testing.T) {
	for n, want := range map[int]string{0: "0B", 8: "8B", 1000: "1000B", 1 << 10: "1KiB", 3 << 10: "3KiB", 1<<20 + 1<<10: "1025KiB", 64 << 20: "64MiB", 2 << 30: "2GiB", 1<<30 + 1: "1073741825B"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for s, want := range map[string]int{"8": 8, " 8B ": 8, "64K": 64 << 10, "64KiB": 64 << 10, "64kib": 64 << 10, "256M": 256 << 20, "256MB": 256 << 20, "1G": 1 << 30, "1GiB": 1 << 30} {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v, want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "K", "-1", "1T", "1.5M", "x"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = nil error, want one", s)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 7, 1 << 10, 5 << 20, 3 << 30, 12345} {
		if got, err := Parse(Format(n)); err != nil || got != n {
			t.Errorf("Parse(Format(%d)) = %d, %v", n, got, err)
		}
	}
}
