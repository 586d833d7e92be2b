package launch

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// The launchers' decoders fuzzed: whatever bytes a store hands a launcher
// as a plan, a report or a stop request, decoding returns an error or a
// value whose every field checked (texts printable, counts and ranges
// bounded), and never panics. The sealer is the insecure one (no key), so
// that the fuzzer reaches the JSON and the checks; the sealed path is one
// more MAC comparison before them (TestDecodeRefusesBadSeal).

// fuzzJSON adds v's JSON and a few damaged forms of it to f's corpus.
func fuzzJSON(f *testing.F, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Add([]byte(strings.Replace(string(b), "1", "-1", 1)))
	f.Add([]byte(strings.Replace(string(b), "1", "99999999999999999999", 1)))
}

// printableText fails t if s, a text a launcher would print, is not
// printable.
func printableText(t *testing.T, field, s string) {
	if !utf8.ValidString(s) || strings.ContainsAny(s, "\x00\x1b\n\r\x7f") {
		t.Fatalf("%s %q passed the checks unprintable", field, s)
	}
}

func FuzzDecodePlan(f *testing.F) {
	fuzzJSON(f, goodPlan())
	fuzzJSON(f, nodePlan{Attempt: 1, Err: "launch: out of restarts"})
	f.Add([]byte(`{"attempt":1,"run_id":"x","store_port":40000,"members":[0,1],"ranks_per_node":-1}`))
	f.Add([]byte(`{"attempt":1,"run_id":"\u001b[2J","store_port":9,"members":[1,1,7],"ranks_per_node":40}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		p, err := decodePlan(sealer{}, "elastic/0/plan", v, 1, 2, 1)
		if err != nil {
			return
		}
		printableText(t, "err", p.Err)
		if p.Done || p.Err != "" {
			return
		}
		if p.RanksPerNode != 1 || len(p.Members) < 1 || len(p.Members) > 2 || p.Members[0] != 0 {
			t.Fatalf("accepted ranks_per_node %d, members %v", p.RanksPerNode, p.Members)
		}
		if p.StorePort < minStorePort || p.StorePort > 65535 {
			t.Fatalf("accepted store_port %d", p.StorePort)
		}
		printableText(t, "run_id", p.RunID)
		for _, n := range p.Notes {
			printableText(t, "note", n)
		}
	})
}

func FuzzDecodeReport(f *testing.F) {
	fuzzJSON(f, nodeReport{Node: 1, Ranks: 2, Attempt: 0, OK: false,
		Fail: &wireFailure{Rank: 3, Pid: 42, Reason: "exited with status 3", Seq: 1}, Addr: "h1 (10.0.0.2)"})
	fuzzJSON(f, nodeReport{Node: 1, Ranks: 2, Attempt: 0, Signal: "interrupt", Fatal: "gives up"})
	f.Fuzz(func(t *testing.T, v []byte) {
		rep, err := decodeReport(sealer{}, "elastic/1/node/1", v, 1, 0)
		if err != nil {
			return
		}
		if rep.Node != 1 || rep.Attempt != 0 || rep.Ranks < 1 || rep.Ranks > maxNodeRanks {
			t.Fatalf("accepted node %d, attempt %d, ranks %d", rep.Node, rep.Attempt, rep.Ranks)
		}
		for field, s := range map[string]string{"addr": rep.Addr, "signal": rep.Signal, "fatal": rep.Fatal, "master": rep.Master} {
			printableText(t, field, s)
		}
		if rep.Fail != nil {
			printableText(t, "fail.reason", rep.Fail.Reason)
		}
	})
}

func FuzzDecodeStop(f *testing.F) {
	fuzzJSON(f, stopMsg{Node: 1, Rank: 3, Pid: 42, Reason: "exited with status 3"})
	f.Fuzz(func(t *testing.T, v []byte) {
		m, err := decodeStop(sealer{}, "elastic/0/stop", v, 2)
		if err != nil {
			return
		}
		if m.Node < 0 || m.Node > 1 || m.Rank < -1 || m.Pid < 0 {
			t.Fatalf("accepted node %d, rank %d, pid %d", m.Node, m.Rank, m.Pid)
		}
		printableText(t, "reason", m.Reason)
	})
}

// Under a launcher key, a value whose MAC does not check, was sealed for
// another store key, or is shorter than a MAC is refused before its JSON
// is read; a value sealed for its key decodes.
func TestDecodeRefusesBadSeal(t *testing.T) {
	s := newSealer("a secret of the job, long enough")
	body, err := json.Marshal(goodPlan())
	if err != nil {
		t.Fatal(err)
	}
	const k = "elastic/0/plan"
	if _, err := decodePlan(s, k, s.seal(k, body), 1, 2, 1); err != nil {
		t.Fatalf("a plan sealed for its key: %v", err)
	}
	flipped := s.seal(k, body)
	flipped[len(flipped)-2] ^= 1
	for name, v := range map[string][]byte{
		"changed body":     flipped,
		"another key":      s.seal("elastic/1/plan", body),
		"unsealed":         body,
		"shorter than MAC": []byte("{}"),
	} {
		if _, err := decodePlan(s, k, v, 1, 2, 1); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}
