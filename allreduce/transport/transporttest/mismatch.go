package transporttest

// Subtests of misuse: header and length mismatches, reported to both sides,
// and an invalid peer.

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ringddp/ringddp/allreduce/transport"
)

func (s *suite) headerMismatch(t *testing.T) {
	conns := s.conns(t, 2)
	ctx := boundCtx(t)
	sh, rh := header(0), header(0)
	rh.Kind = 4
	rh.Root = 1
	p := payload(5, 64)
	sent := goRun(func() error {
		err := conns[0].Send(ctx, 1, sh, p)
		return senderSawError(ctx, conns[0], 1, err)
	})
	var rec recorder
	err := await(t, goRun(func() error { return conns[1].Recv(ctx, 0, rh, len(p), &rec) }), bound, "Recv")
	var mm *transport.MismatchError
	if !errors.As(err, &mm) {
		t.Fatalf("receiver: got %v, want a *transport.MismatchError", err)
	}
	if !errors.Is(err, transport.ErrMismatch) {
		t.Errorf("receiver: %v does not wrap ErrMismatch", err)
	}
	if mm.Peer != 0 || mm.Local != rh || mm.Remote != sh || mm.LocalBytes != len(p) || mm.RemoteBytes != len(p) {
		t.Errorf("receiver: %+v, want Peer 0, Local %v, Remote %v, %d bytes both", mm, rh, sh, len(p))
	}
	if rec.called() {
		t.Errorf("receiver: the sink got %d bytes of a mismatched message", len(rec.got))
	}
	serr := await(t, sent, bound, "Send")
	if !errors.Is(serr, transport.ErrMismatch) && !errors.Is(serr, transport.ErrPeer) {
		t.Errorf("sender: got %v, want an error wrapping ErrMismatch (or ErrPeer)", serr)
	}
	var smm *transport.MismatchError
	if errors.As(serr, &smm) {
		if smm.Peer != 1 || smm.Local != sh || smm.Remote != rh {
			t.Errorf("sender: %+v, want Peer 1, Local %v, Remote %v", smm, sh, rh)
		}
	}
}

func (s *suite) lengthMismatch(t *testing.T) {
	for _, c := range []struct{ sent, expected int }{{16, 8}, {8, 16}, {0, 8}, {8, 0}, {4096 + 3, 4096}} {
		t.Run(fmt.Sprintf("sent=%d/expected=%d", c.sent, c.expected), func(t *testing.T) {
			conns := s.conns(t, 2)
			ctx := boundCtx(t)
			h := header(0)
			p := payload(9, c.sent)
			sent := goRun(func() error {
				err := conns[1].Send(ctx, 0, h, p)
				return senderSawError(ctx, conns[1], 0, err)
			})
			var rec recorder
			err := await(t, goRun(func() error { return conns[0].Recv(ctx, 1, h, c.expected, &rec) }), bound, "Recv")
			var mm *transport.MismatchError
			if !errors.As(err, &mm) {
				t.Fatalf("receiver: got %v, want a *transport.MismatchError", err)
			}
			if mm.Peer != 1 || mm.LocalBytes != c.expected || mm.RemoteBytes != c.sent {
				t.Errorf("receiver: %+v, want Peer 1, LocalBytes %d, RemoteBytes %d", mm, c.expected, c.sent)
			}
			if rec.called() {
				t.Errorf("receiver: the sink got bytes of a mismatched message")
			}
			serr := await(t, sent, bound, "Send")
			if !errors.Is(serr, transport.ErrMismatch) && !errors.Is(serr, transport.ErrPeer) {
				t.Errorf("sender: got %v, want an error wrapping ErrMismatch (or ErrPeer)", serr)
			}
		})
	}
}

func (s *suite) invalidPeer(t *testing.T) {
	conns := s.conns(t, 3)
	ctx := boundCtx(t)
	for _, peer := range []int{-1, 3, 100} {
		err := await(t, goRun(func() error { return conns[0].Send(ctx, peer, header(0), []byte{1}) }), bound, "Send")
		if !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("Send to rank %d of 3: got %v, want ErrInvalid", peer, err)
		}
		err = await(t, goRun(func() error { return conns[0].Recv(ctx, peer, header(0), 1, &recorder{}) }), bound, "Recv")
		if !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("Recv from rank %d of 3: got %v, want ErrInvalid", peer, err)
		}
	}
	// The endpoint still works afterwards.
	transfer(t, ctx, conns, 0, 2, [][]byte{payload(1, 10)})
}
