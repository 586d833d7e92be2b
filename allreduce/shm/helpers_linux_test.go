//go:build linux

package shm_test

import (
	"context"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/internal/transporthelp"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/shm"
	"github.com/ringddp/ringddp/allreduce/transport"
)

var secret = []byte("shm transport test secret 0123")

// shmConnsWith dials n ranks as goroutines of this process (memfds and
// abstract Unix sockets work within a process as between processes);
// mod adjusts each rank's config. The ranks are closed at cleanup.
func shmConnsWith(tb testing.TB, n int, mod func(*shm.Config)) []*shm.Conn {
	tb.Helper()
	store := rendezvous.NewMemStore()
	return transporthelp.DialAll(tb, n, func(ctx context.Context, r int) (*shm.Conn, error) {
		cfg := shm.Config{
			Rank: r, Size: n, Store: store, Secret: secret,
			Slots: 4, SlotSize: 64 << 10,
			Timeout: 8 * time.Second, ConnectTimeout: 20 * time.Second,
		}
		if mod != nil {
			mod(&cfg)
		}
		return shm.Dial(ctx, cfg)
	})
}

func shmConns(tb testing.TB, n int) []*shm.Conn { return shmConnsWith(tb, n, nil) }

func shmConnect(tb testing.TB, n int) []transport.Conn {
	return allreducetest.Conns(shmConns(tb, n))
}

func hdr(seq uint64, step uint32) transport.Header {
	return transport.Header{Group: 1, Seq: seq, Kind: 1, DType: 1, Op: 1, Root: -1, Count: 12345, Step: step}
}

// bufSink copies into dst.
type bufSink struct{ dst []byte }

func (s *bufSink) Consume(off int, p []byte) { copy(s.dst[off:], p) }

func ctxT(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
