package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// TestStallNoticeKept: a peer's stall notice fails nothing (the message
// after it is received) and is kept for PeerStall, header and all.
func TestStallNoticeKept(t *testing.T) {
	c, raw := rawPeer(t, 1<<20)
	want := transport.Stall{Rank: 1, Peer: 0, What: "recv", After: 3 * time.Second,
		Call: transport.Header{Group: 5, Seq: 7, Kind: 1, DType: 1, Op: 1, Root: -1, Count: 1000, Step: 2}}
	b := make([]byte, headerLen+stallLen)
	encodeHeader(b, &frame{typ: typeStall, h: want.Call, length: stallLen})
	encodeStall(b[headerLen:], &want)
	data := make([]byte, headerLen+8)
	encodeHeader(data, &frame{typ: typeData, h: transport.Header{Seq: 1}, length: 8})
	if _, err := raw.Write(append(b, data...)); err != nil {
		t.Fatal(err)
	}
	if err := c.Recv(context.Background(), 1, transport.Header{Seq: 1}, 8, transport.Sink(discardSink{})); err != nil {
		t.Fatalf("the message after a stall notice: %v", err)
	}
	got, ok := c.PeerStall(1)
	if !ok || got != want {
		t.Fatalf("PeerStall(1) = %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := c.PeerStall(0); ok {
		t.Error("rank 0 noted no stall, PeerStall(0) has one")
	}
}
