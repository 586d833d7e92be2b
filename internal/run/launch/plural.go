package launch

import (
	"strconv"
)

// Count is n and noun, in the plural unless n is 1 (the plural adds an
// s): "1 node", "2 nodes", "0 ranks", "1 more connection".
func Count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// listText names the items xs of a noun: "node 1", "nodes 1, 2" (the
// plural adds an s).
func listText(noun string, xs []int) string {
	if len(xs) != 1 {
		noun += "s"
	}
	return noun + " " + intsText(xs)
}

// ranksText names ranks: "rank 2", "ranks 2, 3".
func ranksText(rs []int) string { return listText("rank", rs) }
