package allreduce

import (
	"testing"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// endpointsConn is a transport that says which ranks its local endpoint
// carries (as package mixed does).
type endpointsConn struct {
	transport.Conn
	local []int
}

func (c endpointsConn) LocalEndpointMembers() []int { return c.local }

// A rank runs a composition's stages on two goroutines only where the
// transport's local endpoint carries exactly its node's ranks; and every
// rank cuts the buffer into the same blocks, whatever its transport.
func TestPipelineOverlapsOnlyOverSeparateEndpoints(t *testing.T) {
	hy := &hierarchy{node: 1, members: [][]int{{0, 1}, {2, 3}}, intra: &Group{}}
	for _, c := range []struct {
		conn transport.Conn
		want bool
	}{
		{endpointsConn{local: []int{2, 3}}, true},
		{endpointsConn{local: []int{3, 2}}, true},
		{endpointsConn{local: nil}, false},
		{endpointsConn{local: []int{2}}, false},
		{endpointsConn{local: []int{2, 4}}, false},
		{endpointsConn{local: []int{0, 1, 2, 3}}, false},
		{nil, false}, // no LocalEndpointMembers at all
	} {
		g := &Group{conn: c.conn}
		if got := g.overlaps(hy); got != c.want {
			t.Errorf("local endpoint %v: overlaps %v, want %v", c.conn, got, c.want)
		}
	}
	g := &Group{conn: endpointsConn{local: []int{2, 3}}}
	alone := &hierarchy{node: 1, members: [][]int{{0, 1}, {2}}}
	if g.overlaps(alone) {
		t.Error("a rank alone on its node overlaps")
	}
	for _, c := range []struct{ bytes, want int }{{0, 1}, {4<<20 - 1, 1}, {8 << 20, 2}, {16 << 20, 4}, {64 << 20, 8}, {1 << 30, 8}} {
		if got := g.pipelineBlocks(hy, c.bytes); got != c.want || (&Group{}).pipelineBlocks(alone, c.bytes) != c.want {
			t.Errorf("%d bytes: %d blocks, want %d on every rank", c.bytes, got, c.want)
		}
	}
	one := &hierarchy{members: [][]int{{0, 1}}, intra: &Group{}}
	if got := g.pipelineBlocks(one, 64<<20); got != 1 {
		t.Errorf("one node: %d blocks, want 1", got)
	}
}
