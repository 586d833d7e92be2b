package heal

import (
	"crypto/sha256"
	"fmt"
	"unsafe"

	"github.com/ringddp/ringddp/internal/untrusted"
)

// The descriptor each rank all-gathers in step 1, as int64 words.
const (
	dRole     = 0  // roleSender or roleJoiner
	dParams   = 1  // the arena's length
	dElem     = 2  // its element size
	dJob      = 3  // SHA-256 of the job id (4 words), then its first 64 bytes (8 words)
	dRun      = 15 // the same for the run id
	dKind     = 27 // SHA-256 of the optimizer's kind (4 words), then its first 32 bytes (4 words)
	dHeader   = 35 // a sender's header digest (4 words); 0 for a joiner
	descWords = 39
	textWords = 8 // 64 bytes of an id
	kindWords = 4 // 32 bytes of a kind
)

const (
	roleSender = 1
	roleJoiner = 2
)

// descriptor is this rank's step-1 words.
func descriptor[T Float](st *State[T], joiner bool, headerDigest [4]int64) []int64 {
	d := make([]int64, descWords)
	d[dRole] = roleSender
	if joiner {
		d[dRole] = roleJoiner
	}
	d[dParams] = int64(len(st.Params))
	var e T
	d[dElem] = int64(unsafe.Sizeof(e))
	putText(d[dJob:], st.JobID, textWords)
	putText(d[dRun:], st.RunID, textWords)
	putText(d[dKind:], kindOf(st.Optim.Optimizer, st.Optim.DType), kindWords)
	copy(d[dHeader:dHeader+4], headerDigest[:])
	return d
}

// putText writes s's SHA-256 and its first n words of bytes at d.
func putText(d []int64, s string, n int) {
	sum := sha256.Sum256([]byte(s))
	w := words(sum[:])
	copy(d, w[:])
	b := []byte(s)
	for i := 0; i < n*8 && i < len(b); i++ {
		d[4+i/8] |= int64(b[i]) << (8 * (i % 8))
	}
}

// textOf is the printable start of a text putText wrote.
func textOf(d []int64, n int) string {
	b := make([]byte, 0, n*8)
	for i := range n * 8 {
		c := byte(d[4+i/8] >> (8 * (i % 8)))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return fmt.Sprintf("%q", untrusted.Text(string(b), 64))
}

func sameWords(a, b []int64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// judge checks every rank's descriptor (all, rank by rank) against the
// first sender's, the same way on every rank: the error names the rank
// and what differs.
func judge(all [][]int64, joiner []bool) error {
	ref := -1
	for r, d := range all {
		want := int64(roleSender)
		if joiner[r] {
			want = roleJoiner
		}
		if d[dRole] != want {
			return fmt.Errorf("heal: rank %d takes itself for a %s, the others for a %s: every rank must be given the same joiners", r, roleName(d[dRole]), roleName(want))
		}
		if ref < 0 && !joiner[r] {
			ref = r
		}
	}
	if ref < 0 {
		return fmt.Errorf("heal: every rank is a joiner: no replica holds the state")
	}
	g := all[ref]
	for r, d := range all {
		what := "rank %d (joining)"
		if !joiner[r] {
			what = "rank %d (a sender)"
		}
		who := fmt.Sprintf(what, r)
		switch {
		case !sameWords(d[dJob:dJob+4], g[dJob:dJob+4]) || !sameWords(d[dRun:dRun+4], g[dRun:dRun+4]):
			return fmt.Errorf("heal: %s is of job %s, run %s; rank %d's of job %s, run %s: refused, it belongs to another job or attempt",
				who, textOf(d[dJob:], textWords), textOf(d[dRun:], textWords), ref, textOf(g[dJob:], textWords), textOf(g[dRun:], textWords))
		case d[dParams] != g[dParams] || d[dElem] != g[dElem]:
			return fmt.Errorf("heal: %s has %d parameters of %d bytes, rank %d %d of %d bytes: refused, the state's shape differs",
				who, d[dParams], d[dElem], ref, g[dParams], g[dElem])
		case !sameWords(d[dKind:dKind+4], g[dKind:dKind+4]):
			return fmt.Errorf("heal: %s has optimizer %s, rank %d %s: refused, the state's shape differs",
				who, textOf(d[dKind:], kindWords), ref, textOf(g[dKind:], kindWords))
		case !joiner[r] && !sameWords(d[dHeader:dHeader+4], g[dHeader:dHeader+4]):
			return fmt.Errorf("heal: the senders' states differ: rank %d's header (position, optimizer step and hyper-parameters) is not rank %d's; not healing from replicas that diverged", r, ref)
		}
	}
	return nil
}

func roleName(r int64) string {
	switch r {
	case roleSender:
		return "sender"
	case roleJoiner:
		return "joiner"
	}
	return fmt.Sprintf("role %d", r)
}
