package allreduce_test

import (
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/inproc"
)

// TestMatrixInPieces runs the collective matrix with every message cut
// into pieces of at most 20 bytes (Model.Segment): not a whole number of
// elements of any type, shorter than the chunks of every length but 0 and
// 1, so pieces of one and of several elements, sends and receives cut
// into different counts (uneven ring chunks) and pieces that only send or
// only receive all occur; every algorithm, bitwise against the sequential
// reference on every rank. With the chains forced and Tree's and the
// chains' segments (48 and 64 bytes) larger than the pieces, a message
// one rank sends alone is received inside its peer's exchange (the chain's
// root and its second rank; Tree's leaves and interior ranks): both must
// cut it the same.
func TestMatrixInPieces(t *testing.T) {
	m := allreduce.DefaultModel(true)
	m.Segment = 20
	for _, tc := range []struct {
		name string
		opts []allreduce.GroupOption
	}{
		{"default", []allreduce.GroupOption{allreduce.WithModel(m)}},
		{"chains", []allreduce.GroupOption{allreduce.WithModel(m), allreduce.WithTuning(allreduce.Tuning{TreeSegment: 48, ChainSegment: 64, ChainMin: 1})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allreducetest.Matrix(t, allreducetest.MatrixConfig{
				Connect: allreducetest.Inproc(20*time.Second, inproc.WithLocalSize(testMatrixLocalSize)),
				Ranks:   []int{1, 2, 3, 4, 7},
				Options: tc.opts,
			})
		})
	}
}

// TestSegmentValidated: a negative segment is refused when the group is
// made.
func TestSegmentValidated(t *testing.T) {
	m := allreduce.DefaultModel(true)
	m.Segment = -1
	conns, _, err := allreducetest.InprocConns(1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := allreduce.NewGroup(conns[0], allreduce.WithModel(m)); err == nil {
		t.Fatal("NewGroup accepted a model with segment_bytes -1")
	}
}
