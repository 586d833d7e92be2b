package allreduce

import (
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// The cost of the compositions' pipelined blocks (pipeline.go). A
// composition (hierarchical, torus) of M bytes on several nodes cuts the
// buffer into B = pipelinedBlocks(s, M) blocks and runs three stages on
// each: in (within the node), across (between nodes), out (within the
// node again). With every block alike, let I, A and O be a block's
// stage times (the stage's cost formula at M/B bytes). Over a transport
// that carries a node's messages and the others' apart (Shape.Overlap)
// the stages run on two goroutines of each rank, in pipeline.go's order:
//
//	intra goroutine:  in(0), in(1), out(0), in(2), out(1), ..., in(B-1), out(B-2), out(B-1)
//	across goroutine: across(0), across(1), ..., across(B-1)
//	across(b) starts when in(b) and across(b-1) are done; out(b) when
//	across(b) is done and the intra goroutine reaches it.
//
// pipelineTime follows that schedule exactly (a recurrence over the
// blocks: the finish times of in(b), across(b), out(b)). In closed form,
// where the link between nodes is the bottleneck (A ≥ I + O, the bed's
// case: a slow inter-node link),
//
//	T = I + B·A + O
//
// (the first block's reduce, every block's inter-node phase back to
// back, the last block's gather); where the node's own work is (A ≤ I:
// the intra goroutine never waits but for the last block),
//
//	T = B·(I + O) + max(A, O) − O
//
// (out(B−1) waits for across(B−1), which starts after in(B−1)). B = 1
// is I + A + O, the unpipelined sum. Without Overlap the blocks run one
// after the other, each stage after the other: T = B·(I + A + O).
//
// Blocks are priced all alike at M/B bytes (ChunkBounds makes them differ
// by at most an element); each stage's formula includes its sub-group's
// agreement step, as the blocks' sub-group calls each make one.

// pipelinedBlocks is pipelineBlocks' B for a composition of b bytes on
// shape s (the group's rule, which depends on the size and the number of
// nodes only): 1 on one node.
func pipelinedBlocks(s cost.Shape, b float64) int {
	if s.Nodes <= 1 {
		return 1
	}
	return max(1, min(maxPipelineBlocks, int(b)/minPipelineBlock))
}

// pipelineTime is the time of blocks blocks whose stages take in, across
// and out seconds each, run as pipeline.go runs them: overlapped where
// overlap (Shape.Overlap), else one after the other.
func pipelineTime(blocks int, overlap bool, in, across, out float64) float64 {
	if blocks <= 1 || !overlap {
		return float64(max(blocks, 1)) * (in + across + out)
	}
	var intra, acr float64 // the two goroutines' clocks
	inDone := make([]float64, blocks)
	intra += in
	inDone[0] = intra
	acrossDone := func(b int) float64 { // across(b) in order, after in(b)
		acr = max(acr, inDone[b]) + across
		return acr
	}
	for b := range blocks {
		if b+1 < blocks {
			intra += in
			inDone[b+1] = intra
		}
		intra = max(intra, acrossDone(b)) + out
	}
	return intra
}

// compositionCost is a composition's predicted time on shape s for b
// bytes: its agreement step, then its blocks (pipelinedBlocks) priced by
// pipelineTime from stages, the time of each stage of a block of the
// given bytes.
func compositionCost(m cost.Model, s cost.Shape, b float64, stages func(block float64) (in, across, out float64)) float64 {
	blocks := pipelinedBlocks(s, b)
	in, across, out := stages(b / float64(blocks))
	return m.Agree(s) + pipelineTime(blocks, s.Overlap, in, across, out)
}

// overlapsNodes reports whether conn carries some ranks' messages through
// an endpoint of their own (localEndpoint): the mixed transport, on which
// the compositions overlap their blocks (Shape.Overlap). It depends on
// the transport's type only, so every rank of a group over it agrees.
func overlapsNodes(conn transport.Conn) bool {
	_, ok := conn.(localEndpoint)
	return ok
}
