package allreduce_test

import (
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/inproc"
)

// TestMatrixInPieces runs the collective matrix with every exchange cut
// into pieces of at most 20 bytes (Model.Segment): not a whole number of
// elements of any type, shorter than the chunks of every length but 0 and
// 1, so pieces of one and of several elements, sends and receives cut
// into different counts (uneven ring chunks) and pieces that only send or
// only receive all occur; every algorithm, bitwise against the sequential
// reference on every rank.
func TestMatrixInPieces(t *testing.T) {
	m := allreduce.DefaultModel(true)
	m.Segment = 20
	allreducetest.Matrix(t, allreducetest.MatrixConfig{
		Connect: allreducetest.Inproc(20*time.Second, inproc.WithLocalSize(testMatrixLocalSize)),
		Ranks:   []int{1, 2, 3, 4, 5, 7, 8},
		Options: []allreduce.GroupOption{allreduce.WithModel(m)},
	})
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
