// Package bytesize reads and writes byte counts in binary units, as the
// commands' flags take them and their reports print them: 8B, 4KiB,
// 64MiB, 1GiB. It imports nothing of the module, so every layer may use it.
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// Format renders n as 8B, 4KiB, 64MiB, 1GiB: in the largest binary unit
// that divides it, else in bytes.
func Format(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// Parse reads sizes like 8, 64K, 64KiB, 256M, 1G (binary multiples; the
// B and i of the unit are optional, letters in either case).
func Parse(s string) (int, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := 1
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, t[:len(t)-1]
	}
	v, err := strconv.Atoi(t)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a non-negative number with an optional K, M or G suffix", s)
	}
	return v * mult, nil
}
