package transporttest

// Subtests of the optional PeerMemory capability.

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/ringddp/ringddp/allreduce/transport"
)

// peerMemory: every rank exposes its buffer, sees every peer's, and the
// exposure ends cleanly, several times over.
func (s *suite) peerMemory(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			conns := s.conns(t, n)
			if _, ok := conns[0].(transport.PeerMemory); !ok {
				t.Skipf("%T does not implement transport.PeerMemory", conns[0])
			}
			ctx := boundCtx(t)
			res := make([]<-chan error, n)
			for r := range n {
				pm := conns[r].(transport.PeerMemory)
				res[r] = goRun(func() error {
					for k, size := range []int{64, 8, 4096} {
						h := header(0)
						h.Seq = uint64(k)
						p := payload(uint64(r*10+k), size)
						views, err := pm.Expose(ctx, h, p)
						if err != nil {
							return fmt.Errorf("rank %d round %d: Expose: %w", r, k, err)
						}
						if len(views) != n {
							return fmt.Errorf("rank %d: %d views, want %d", r, len(views), n)
						}
						for q, v := range views {
							if !bytes.Equal(v, payload(uint64(q*10+k), size)) {
								return fmt.Errorf("rank %d round %d: view of rank %d is not its buffer", r, k, q)
							}
						}
						if err := pm.Arrive(ctx); err != nil {
							return fmt.Errorf("rank %d round %d: Arrive: %w", r, k, err)
						}
						if err := pm.Release(ctx); err != nil {
							return fmt.Errorf("rank %d round %d: Release: %w", r, k, err)
						}
					}
					return nil
				})
			}
			for r := range n {
				if err := await(t, res[r], bound, "PeerMemory"); err != nil {
					t.Error(err)
				}
			}
			// Messages flow again after the exposures.
			if n > 1 && !t.Failed() {
				transfer(t, ctx, conns, 0, n-1, [][]byte{payload(1, 24), payload(2, 0)})
				transfer(t, ctx, conns, n-1, 0, [][]byte{payload(3, 4096)})
			}
		})
	}
}

// peerMemoryMismatch: ranks exposing under different headers both get a
// *MismatchError.
func (s *suite) peerMemoryMismatch(t *testing.T) {
	conns := s.conns(t, 2)
	if _, ok := conns[0].(transport.PeerMemory); !ok {
		t.Skipf("%T does not implement transport.PeerMemory", conns[0])
	}
	ctx := boundCtx(t)
	res := make([]<-chan error, 2)
	for r := range 2 {
		pm := conns[r].(transport.PeerMemory)
		h := header(0)
		h.Count = int64(100 + r)
		res[r] = goRun(func() error {
			_, err := pm.Expose(ctx, h, payload(1, 64))
			return err
		})
	}
	for r := range 2 {
		err := await(t, res[r], bound, "Expose")
		var mm *transport.MismatchError
		if !errors.As(err, &mm) {
			t.Errorf("rank %d: got %v, want a *transport.MismatchError", r, err)
			continue
		}
		if mm.Peer != 1-r || mm.Local.Count != int64(100+r) || mm.Remote.Count != int64(100+1-r) {
			t.Errorf("rank %d: %+v: want Peer %d, Local.Count %d, Remote.Count %d", r, mm, 1-r, 100+r, 101-r)
		}
	}
}
