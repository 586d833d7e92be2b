package cuda

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/inproc"
)

// These tests run the device ring's plans on host memory (no GPU): the
// results must be bitwise those of package allreduce's host ring on
// special values, and the synchronisation the device code derives from a
// plan must order every conflicting pair of accesses (TestPlanRaceFree).

// planCase is one plan configuration.
type planCase struct {
	kind     allreduce.Kind
	inPlace  bool // ReduceScatter dst = src's own chunk, AllGather src = dst's own chunk
	n, count int
	segBytes int
}

func planCases(dts []allreduce.DType) []planCase {
	var out []planCase
	for n := 1; n <= 8; n++ {
		for _, count := range []int{0, 1, n - 1, n + 1, 37, 1000} {
			for _, seg := range []int{0, 8, 24} {
				for _, k := range []allreduce.Kind{allreduce.KindAllReduce, allreduce.KindReduceScatter, allreduce.KindAllGather} {
					for _, ip := range []bool{false, true} {
						if k == allreduce.KindAllReduce && ip {
							continue
						}
						out = append(out, planCase{kind: k, inPlace: ip, n: n, count: count, segBytes: seg})
					}
				}
			}
		}
	}
	return out
}

// specialBits returns a random element of es bytes, often a special value:
// NaNs with payloads (quiet and signalling, both signs), ±0, ±Inf,
// denormals, or random bits.
func specialBits(rng *rand.Rand, dt allreduce.DType) uint64 {
	switch dt {
	case allreduce.Float32:
		switch rng.IntN(10) {
		case 0:
			return uint64(0x7f800000 | uint32(rng.IntN(1<<23-1)+1) | uint32(rng.IntN(2))<<31) // NaN, any payload
		case 1:
			return uint64(uint32(rng.IntN(2)) << 31) // ±0
		case 2:
			return uint64(0x7f800000 | uint32(rng.IntN(2))<<31) // ±Inf
		case 3:
			return uint64(uint32(rng.IntN(1<<23)) | uint32(rng.IntN(2))<<31) // denormal
		case 4, 5:
			return uint64(math.Float32bits(float32(rng.IntN(21) - 10)))
		}
		return uint64(rng.Uint32())
	case allreduce.Float64:
		switch rng.IntN(10) {
		case 0:
			return 0x7ff0000000000000 | (rng.Uint64N(1<<52-1) + 1) | uint64(rng.IntN(2))<<63
		case 1:
			return uint64(rng.IntN(2)) << 63
		case 2:
			return 0x7ff0000000000000 | uint64(rng.IntN(2))<<63
		case 3:
			return rng.Uint64N(1<<52) | uint64(rng.IntN(2))<<63
		case 4, 5:
			return math.Float64bits(float64(rng.IntN(21) - 10))
		}
		return rng.Uint64()
	case allreduce.Int32:
		if rng.IntN(3) == 0 {
			return uint64(uint32(rng.IntN(5) - 2))
		}
		return uint64(rng.Uint32())
	}
	if rng.IntN(3) == 0 {
		return uint64(int64(rng.IntN(5) - 2))
	}
	return rng.Uint64()
}

func randomBytes(rng *rand.Rand, dt allreduce.DType, n int) []byte {
	es := dt.Size()
	b := make([]byte, n*es)
	for i := 0; i < n; i++ {
		v := specialBits(rng, dt)
		for j := 0; j < es; j++ {
			b[i*es+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// runPlansOnHost executes every rank's plan on host buffers, in a random
// order that respects the plan's synchronisation (the order the device may
// choose), with package allreduce's host kernel (Combine) for each reduce.
func runPlansOnHost(t *testing.T, rng *rand.Rand, plans []*plan, bufs [][numBufs][]byte) {
	t.Helper()
	n := len(plans)
	for r, p := range plans {
		for _, x := range p.entry {
			exec(t, p, x, bufs[r], nil)
		}
	}
	if plans[0].records() == 0 {
		return
	}
	// done[r] = events recorded (index of the next node); entry is index 0.
	done := make([]int, n)
	for r := range done {
		done[r] = 1 // entry recorded
	}
	total := plans[0].records()
	for {
		var ready []int
		for r, p := range plans {
			if done[r] == total {
				continue
			}
			g, k := (done[r]-1)/p.segs, (done[r]-1)%p.segs
			w := p.waitIndex(g, k)
			if done[mod(r-1, n)] > w && done[mod(r+1, n)] > w {
				ready = append(ready, r)
			}
		}
		if len(ready) == 0 {
			break
		}
		r := ready[rng.IntN(len(ready))]
		p := plans[r]
		g, k := (done[r]-1)/p.segs, (done[r]-1)%p.segs
		if x := p.steps[g][k]; x.out.n > 0 {
			exec(t, p, x, bufs[r], &bufs[mod(r-1, n)])
		}
		done[r]++
	}
	for r := range done {
		if done[r] != total {
			t.Fatalf("plans deadlock: rank %d stopped at event %d of %d (%v)", r, done[r], total, done)
		}
	}
}

// exec performs one action on host memory.
func exec(t *testing.T, p *plan, x action, mine [numBufs][]byte, left *[numBufs][]byte) {
	t.Helper()
	get := func(b *[numBufs][]byte, s span) []byte { return b[s.buf][s.off : s.off+s.n] }
	out := get(&mine, x.out)
	switch x.kind {
	case actLocalCopy:
		copy(out, get(&mine, x.a))
	case actCopy:
		copy(out, get(left, x.b))
	case actReduce:
		op := p.op
		if op == allreduce.Avg {
			op = allreduce.Sum
		}
		a, b := append([]byte(nil), get(&mine, x.a)...), get(left, x.b)
		if err := allreduce.Combine(p.dt, op, out, a, b); err != nil {
			t.Fatal(err)
		}
		if p.op == allreduce.Avg && x.last {
			divideHost(p.dt, out, p.ranks)
		}
	}
}

func divideHost(dt allreduce.DType, b []byte, n int) {
	switch dt {
	case allreduce.Float32:
		s := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
		for i := range s {
			s[i] /= float32(n)
		}
	case allreduce.Float64:
		s := unsafe.Slice((*float64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
		for i := range s {
			s[i] /= float64(n)
		}
	}
}

// hostRing runs c on the host ring (package allreduce over inproc) and
// returns every rank's destination.
func hostRing(t *testing.T, c collective, pc planCase, inputs [][]byte) [][]byte {
	t.Helper()
	w, err := inproc.NewWorld(pc.n)
	if err != nil {
		t.Fatal(err)
	}
	outs := make([][]byte, pc.n)
	ctx := context.Background()
	errs := allreducetest.RunRanks(conns(w), func(g *allreduce.Group) error {
		r := g.Rank()
		in := append([]byte(nil), inputs[r]...)
		switch c.kind {
		case allreduce.KindAllReduce:
			err := allreduceBytes(ctx, g, c, in)
			outs[r] = in
			return err
		case allreduce.KindReduceScatter:
			lo, hi := chunk(c.count, pc.n, r, c.dt.Size())
			dst := make([]byte, hi-lo)
			if pc.inPlace {
				dst = in[lo:hi]
			}
			err := reduceScatterBytes(ctx, g, c, dst, in)
			outs[r] = append([]byte(nil), dst...)
			return err
		default:
			lo, hi := chunk(c.count, pc.n, r, c.dt.Size())
			dst := make([]byte, c.count*c.dt.Size())
			src := in[lo:hi]
			if pc.inPlace {
				copy(dst[lo:hi], src)
				src = dst[lo:hi]
			}
			err := allGatherBytes(ctx, g, c, dst, src)
			outs[r] = dst
			return err
		}
	}, allreduce.WithAlgorithm(allreduce.Ring))
	for r, err := range errs {
		if err != nil {
			t.Fatalf("host ring, rank %d: %v", r, err)
		}
	}
	return outs
}

func TestPlanMatchesHostRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	cases := planCases(DTypes)
	ran := 0
	for i, pc := range cases {
		if testing.Short() && i%7 != 0 {
			continue
		}
		for _, dt := range DTypes {
			ops := Ops
			if pc.kind == allreduce.KindAllGather {
				ops = []allreduce.ReduceOp{0}
			}
			for _, op := range ops {
				if op == allreduce.Avg && !dt.IsFloat() {
					continue
				}
				c := collective{kind: pc.kind, dt: dt, op: op, count: pc.count}
				name := fmt.Sprintf("%v/inplace=%v/n=%d/seg=%d", c, pc.inPlace, pc.n, pc.segBytes)
				checkPlanAgainstHost(t, rng, name, c, pc)
				ran++
			}
		}
	}
	t.Logf("%d configurations", ran)
}

func checkPlanAgainstHost(t *testing.T, rng *rand.Rand, name string, c collective, pc planCase) {
	t.Helper()
	es := c.dt.Size()
	inputs := make([][]byte, pc.n)
	for r := range inputs {
		inputs[r] = randomBytes(rng, c.dt, c.count)
	}
	want := hostRing(t, c, pc, inputs)
	plans := make([]*plan, pc.n)
	bufs := make([][numBufs][]byte, pc.n)
	for r := range plans {
		p, err := makePlan(c, pc.n, r, pc.inPlace, pc.segBytes)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		plans[r] = p
		lo, hi := chunk(c.count, pc.n, r, es)
		in := append([]byte(nil), inputs[r]...)
		switch c.kind {
		case allreduce.KindAllReduce:
			bufs[r][bufData] = in
		case allreduce.KindReduceScatter:
			bufs[r][bufSrc] = in
			bufs[r][bufData] = make([]byte, hi-lo)
		default:
			bufs[r][bufData] = make([]byte, c.count*es)
			if pc.inPlace {
				copy(bufs[r][bufData][lo:hi], in[lo:hi])
			} else {
				bufs[r][bufSrc] = in[lo:hi]
			}
		}
		bufs[r][bufScratch0] = make([]byte, p.scratch)
		bufs[r][bufScratch1] = make([]byte, p.scratch)
	}
	runPlansOnHost(t, rng, plans, bufs)
	for r := range plans {
		got := bufs[r][bufData]
		if c.kind == allreduce.KindReduceScatter && pc.inPlace {
			lo, hi := chunk(c.count, pc.n, r, es)
			got = bufs[r][bufSrc][lo:hi]
		}
		if !bytes.Equal(got, want[r]) {
			t.Fatalf("%s: rank %d differs from the host ring at element %d", name, r, firstDiff(got, want[r])/es)
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestPlanRaceFree checks the synchronisation of every plan as a static
// race detector: it builds the happens-before order the device code
// enforces (each stream in order; a segment after the same segment of the
// previous step on both neighbours; the tail after the right neighbour's
// last segment; the caller's work before entry and after the tail) and
// requires every two accesses to one byte of a rank's buffers, one of them
// a write, to be ordered.
func TestPlanRaceFree(t *testing.T) {
	checked := 0
	for _, pc := range planCases(nil) {
		for _, dt := range []allreduce.DType{allreduce.Float32, allreduce.Float64} {
			c := collective{kind: pc.kind, dt: dt, op: allreduce.Sum, count: pc.count}
			plans := make([]*plan, pc.n)
			for r := range plans {
				p, err := makePlan(c, pc.n, r, pc.inPlace, pc.segBytes)
				if err != nil {
					t.Fatal(err)
				}
				plans[r] = p
			}
			if err := raceCheck(plans); err != nil {
				t.Fatalf("%v inplace=%v n=%d seg=%d: %v", c, pc.inPlace, pc.n, pc.segBytes, err)
			}
			checked++
		}
	}
	t.Logf("%d plans race-free", checked)
}

type access struct {
	node  int
	rank  int
	buf   bufID
	lo    int
	hi    int
	write bool
}

// raceCheck checks that no two accesses of plans, on one rank's buffer,
// overlapping and at least one a write, are unordered by the plans'
// synchronisation (raceGraph, happensBefore).
func raceCheck(plans []*plan) error {
	preds, acc, per := raceGraph(plans)
	reach, err := happensBefore(preds)
	if err != nil {
		return err
	}
	hb := func(a, b int) bool { return reach[b][a/64]&(1<<(a%64)) != 0 }
	for i := range acc {
		for j := i + 1; j < len(acc); j++ {
			x, y := acc[i], acc[j]
			if x.node == y.node || x.rank != y.rank || x.buf != y.buf || !(x.write || y.write) {
				continue
			}
			if x.lo >= y.hi || y.lo >= x.hi {
				continue
			}
			if !hb(x.node, y.node) && !hb(y.node, x.node) {
				return fmt.Errorf("race on rank %d's %v bytes [%d,%d) and [%d,%d): nodes %d and %d unordered",
					x.rank, x.buf, x.lo, x.hi, y.lo, y.hi, x.node%per, y.node%per)
			}
		}
	}
	return nil
}

// raceGraph is plans' happens-before graph, per nodes a rank (preds[v]:
// the nodes directly before node v), and every node's buffer accesses.
func raceGraph(plans []*plan) (preds [][]int, acc []access, per int) {
	n := len(plans)
	// Nodes per rank: user-before, entry, one per segment, tail, user-after.
	per = 4 + len(plans[0].steps)*plans[0].segs
	id := func(r, i int) int { return r*per + i }
	const before, entryN = 0, 1
	seg := func(r, g, k int) int { return id(r, 2+g*plans[r].segs+k) }
	tail := func(r int) int { return id(r, per-2) }
	after := func(r int) int { return id(r, per-1) }
	preds = make([][]int, n*per)
	add := func(node, r int, s span, write bool) {
		if s.n > 0 {
			acc = append(acc, access{node, r, s.buf, s.off, s.off + s.n, write})
		}
	}
	hasSteps := len(plans[0].steps) > 0
	for r, p := range plans {
		left, right := mod(r-1, n), mod(r+1, n)
		for i := 1; i < per; i++ {
			preds[id(r, i)] = append(preds[id(r, i)], id(r, i-1)) // stream order
		}
		for g := range p.steps {
			for k := 0; k < p.segs; k++ {
				w := id(left, entryN)
				wr := id(right, entryN)
				if g > 0 {
					w, wr = seg(left, g-1, k), seg(right, g-1, k)
				}
				preds[seg(r, g, k)] = append(preds[seg(r, g, k)], w, wr)
				x := p.steps[g][k]
				add(seg(r, g, k), r, x.out, true)
				if x.kind != actCopy {
					add(seg(r, g, k), r, x.a, false)
				}
				if x.kind != actLocalCopy {
					add(seg(r, g, k), left, x.b, false)
				}
			}
		}
		if hasSteps {
			last := seg(right, len(p.steps)-1, p.segs-1)
			preds[tail(r)] = append(preds[tail(r)], last)
		}
		for _, x := range p.entry {
			add(id(r, entryN), r, x.out, true)
			add(id(r, entryN), r, x.a, false)
		}
		for b := bufID(0); b < numBufs; b++ {
			add(id(r, before), r, span{b, 0, 1 << 40}, true)
			add(after(r), r, span{b, 0, 1 << 40}, true)
		}
	}
	return preds, acc, per
}

// happensBefore is, for every node of the graph preds, the set of nodes
// that happen before it (bitsets), or an error if the graph has a cycle.
func happensBefore(preds [][]int) ([][]uint64, error) {
	// reach[v] = every node that happens before v (bitsets).
	words := (len(preds) + 63) / 64
	reach := make([][]uint64, len(preds))
	var visit func(v int)
	visiting := make([]uint8, len(preds))
	var cycle error
	visit = func(v int) {
		if visiting[v] == 2 || cycle != nil {
			return
		}
		if visiting[v] == 1 {
			cycle = fmt.Errorf("the synchronisation has a cycle through node %d", v)
			return
		}
		visiting[v] = 1
		reach[v] = make([]uint64, words)
		for _, u := range preds[v] {
			visit(u)
			if cycle != nil {
				return
			}
			reach[v][u/64] |= 1 << (u % 64)
			for i, w := range reach[u] {
				reach[v][i] |= w
			}
		}
		visiting[v] = 2
	}
	for v := range preds {
		visit(v)
	}
	if cycle != nil {
		return nil, cycle
	}
	return reach, nil
}

// TestPlanEventsUniform: every rank of a collective records the same number
// of events (the device code's event indices are shared by all ranks), and
// every wait refers to an event recorded earlier in the neighbour's order.
func TestPlanEventsUniform(t *testing.T) {
	for _, pc := range planCases(nil) {
		c := collective{kind: pc.kind, dt: allreduce.Float32, op: allreduce.Sum, count: pc.count}
		var want int
		for r := 0; r < pc.n; r++ {
			p, err := makePlan(c, pc.n, r, pc.inPlace, pc.segBytes)
			if err != nil {
				t.Fatal(err)
			}
			if r == 0 {
				want = p.records()
			}
			if p.records() != want {
				t.Fatalf("%v n=%d: rank %d records %d events, rank 0 %d", c, pc.n, r, p.records(), want)
			}
			for g := range p.steps {
				for k := 0; k < p.segs; k++ {
					if p.waitIndex(g, k) >= p.recordIndex(g, k) {
						t.Fatalf("%v: step %d segment %d waits for event %d, not before its own %d", c, g, k, p.waitIndex(g, k), p.recordIndex(g, k))
					}
				}
			}
		}
	}
}
