package frameseal

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
)

func testKey() (k [KeyLen]byte) {
	for i := range k {
		k[i] = byte(i)
	}
	return k
}

func mustOpen(t testing.TB, k [KeyLen]byte, label string) *Dir {
	t.Helper()
	d, err := Open(k, label)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSealKnownAnswers compares the tags with those of an independent
// implementation: Python's cryptography package (HKDF-SHA256 with no salt,
// then AESGCM(k).encrypt(0x00000000 | counter, b"", record)).
func TestSealKnownAnswers(t *testing.T) {
	d := mustOpen(t, testKey(), "test label")
	for i, c := range []struct{ rec, tag string }{
		{"header", "823ee8ddb852c9d4626ab69bb1e09303"},
		{"", "1676bae18e0e5199a9ecbc2c959c8c40"},
		{"a body of bytes", "bc6a3f6e1409ca9280d9625f24f5cb0c"},
	} {
		if got := hex.EncodeToString(d.Seal(make([]byte, TagLen), []byte(c.rec))); got != c.tag {
			t.Errorf("record %d (%q): tag %s, want %s", i, c.rec, got, c.tag)
		}
	}
	if d.Next() != 3 {
		t.Errorf("counter %d after 3 records", d.Next())
	}
}

// TestCheckRefuses: a changed byte, a changed tag, a replayed, reordered
// or dropped record, and a record of another direction or connection all
// fail, while the records before them check.
func TestCheckRefuses(t *testing.T) {
	recs := [][]byte{[]byte("request header"), []byte("key and value"), []byte("second header")}
	seal := func(label string, k [KeyLen]byte) [][]byte {
		d := mustOpen(t, k, label)
		tags := make([][]byte, len(recs))
		for i, r := range recs {
			tags[i] = d.Seal(make([]byte, TagLen), r)
		}
		return tags
	}
	tags := seal("a to b", testKey())
	check := func(what string, order []int, rec func(i int) []byte, tag func(i int) []byte, wantFail int) {
		t.Helper()
		d := mustOpen(t, testKey(), "a to b")
		for n, i := range order {
			err := d.Check(rec(i), tag(i))
			if n < wantFail && err != nil {
				t.Errorf("%s: record %d: %v", what, n, err)
			}
			if n == wantFail {
				if !errors.Is(err, ErrAuth) {
					t.Errorf("%s: record %d checked (%v), want a failure", what, n, err)
				}
				return
			}
		}
		if wantFail < len(order) {
			t.Errorf("%s: nothing failed", what)
		}
	}
	plain := func(i int) []byte { return recs[i] }
	tagOf := func(i int) []byte { return tags[i] }
	check("in order", []int{0, 1, 2}, plain, tagOf, 3)
	check("replayed", []int{0, 1, 1}, plain, tagOf, 2)
	check("reordered", []int{1, 0}, plain, tagOf, 0)
	check("dropped", []int{0, 2}, plain, tagOf, 1)
	check("changed byte", []int{0, 1}, func(i int) []byte {
		r := append([]byte{}, recs[i]...)
		if i == 1 {
			r[3] ^= 1
		}
		return r
	}, tagOf, 1)
	check("changed tag", []int{0}, plain, func(i int) []byte {
		g := append([]byte{}, tags[i]...)
		g[15] ^= 0x80
		return g
	}, 0)
	check("short tag", []int{0}, plain, func(i int) []byte { return tags[i][:8] }, 0)
	other := seal("b to a", testKey())
	check("other direction", []int{0}, plain, func(i int) []byte { return other[i] }, 0)
	k2 := testKey()
	k2[0] ^= 1
	another := seal("a to b", k2)
	check("other connection", []int{0}, plain, func(i int) []byte { return another[i] }, 0)
}

// FuzzCheck: a record and tag from the network check only when the tag is
// the one the sender seals for that record at that position.
func FuzzCheck(f *testing.F) {
	d := mustOpen(f, testKey(), "fuzz")
	good := d.Seal(make([]byte, TagLen), []byte("header"))
	f.Add([]byte("header"), good)
	f.Add([]byte("header"), good[:15])
	f.Add([]byte{}, make([]byte, TagLen))
	f.Fuzz(func(t *testing.T, rec, tag []byte) {
		recv := mustOpen(t, testKey(), "fuzz")
		send := mustOpen(t, testKey(), "fuzz")
		want := send.Seal(make([]byte, TagLen), rec)
		err := recv.Check(rec, tag)
		if (err == nil) != bytes.Equal(tag, want) {
			t.Fatalf("Check(%x, %x) = %v; the sealed tag is %x", rec, tag, err, want)
		}
		if recv.Next() != 1 {
			t.Fatalf("counter %d after one record", recv.Next())
		}
	})
}

// BenchmarkSeal is the cost of a record's tag: what sealing adds to each
// header and body, at each end.
func BenchmarkSeal(b *testing.B) {
	for _, n := range []int{16, 64 << 10} {
		b.Run(fmt.Sprintf("record=%d", n), func(b *testing.B) {
			d := mustOpen(b, testKey(), "bench")
			rec, tag := make([]byte, n), make([]byte, TagLen)
			b.SetBytes(int64(n))
			for i := 0; i < b.N; i++ {
				d.Seal(tag, rec)
			}
		})
	}
}
