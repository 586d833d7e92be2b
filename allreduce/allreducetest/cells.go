package allreducetest

// The matrix's cells: one collective call on n ranks of one length, operator,
// element type and root, named as its subtest.

import (
	"fmt"

	"github.com/ringddp/ringddp/allreduce"
)

// cell is one cell of the matrix.
type cell struct {
	coll   allreduce.Kind
	algo   allreduce.Algorithm // AllReduce; Auto otherwise
	n      int
	length int
	op     allreduce.ReduceOp // 0 for AllGather, Broadcast and Barrier
	dt     allreduce.DType
	roots  []int // Broadcast and Reduce: run from each in turn
	huge   bool
}

func (c cell) name() string {
	if c.coll == allreduce.KindBarrier {
		return "calls=3"
	}
	s := fmt.Sprintf("len=%d", c.length)
	if c.op != 0 {
		s += "/op=" + c.op.String()
	}
	return s + "/dtype=" + c.dt.String()
}

// invalid: Avg on an integer type, an ErrInvalid error.
func (c cell) invalid() bool { return c.op == allreduce.Avg && !c.dt.IsFloat() }

func hasOp(coll allreduce.Kind) bool {
	return coll == allreduce.KindAllReduce || coll == allreduce.KindReduceScatter || coll == allreduce.KindReduce
}

func rooted(coll allreduce.Kind) bool {
	return coll == allreduce.KindBroadcast || coll == allreduce.KindReduce
}

// cells lists the cells of coll on n ranks, in subtest order.
func (m *matrix) cells(coll allreduce.Kind, algo allreduce.Algorithm, n int) []cell {
	if coll == allreduce.KindBarrier {
		return []cell{{coll: coll, n: n}}
	}
	var out []cell
	add := func(length int, ops []allreduce.ReduceOp, dts []allreduce.DType, huge, thin bool, rot int) {
		var roots []int
		if rooted(coll) {
			roots = m.cfg.Roots(coll, n, length, m.cfg.HugeLen)
		}
		one := func(op allreduce.ReduceOp, dt allreduce.DType) {
			out = append(out, cell{coll: coll, algo: algo, n: n, length: length, op: op, dt: dt, roots: roots, huge: huge})
		}
		if thin {
			for j := rot * m.cfg.ThinCells; j < (rot+1)*m.cfg.ThinCells; j++ {
				one(ops[j%len(ops)], dts[j%len(dts)])
			}
			return
		}
		for _, op := range ops {
			for _, dt := range dts {
				one(op, dt)
			}
		}
	}
	ops := []allreduce.ReduceOp{0}
	if hasOp(coll) {
		ops = m.cfg.Ops
	}
	thin := n > m.cfg.FullRanks
	lengths := m.cfg.Lengths(n)
	for i, length := range lengths {
		add(length, ops, m.cfg.DTypes, false, thin, i)
		for j, dt := range m.cfg.HalfDTypes {
			if !thin && !m.thin || i == len(lengths)-1 && j == n%len(m.cfg.HalfDTypes) {
				add(length, []allreduce.ReduceOp{ops[(i+n+j)%len(ops)]}, []allreduce.DType{dt}, false, false, 0)
			}
		}
	}
	if m.cfg.Huge != nil {
		if ops, dts := m.cfg.Huge(coll, algo, n); len(ops) > 0 {
			if m.thin {
				if n < raceHugeRanks || m.hugeRan[cellKind{coll, algo}] {
					return out
				}
				m.hugeRan[cellKind{coll, algo}] = true
				ops, dts = ops[:1], dts[:1]
			}
			add(m.cfg.HugeLen, ops, dts, true, false, 0)
		}
	}
	return out
}
