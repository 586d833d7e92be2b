package ddp_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/cost"
	"github.com/ringddp/ringddp/allreduce/inproc"
	"github.com/ringddp/ringddp/allreduce/transport"
	. "github.com/ringddp/ringddp/ddp"
)

// Auto compresses on a link slow enough (1 Mbit/s, ranks without
// shared memory) for the bytes saved to outweigh the work, and not on the
// in-process default; either way
// every rank decides alike, logs each bucket once, and reduces as the
// hook it chose would (bitwise).
func TestAutoCompressionDecides(t *testing.T) {
	const ranks, n = 2, 1 << 16
	slow := cost.DefaultModelFor(cost.FlatShape(ranks))
	slow.Intra = cost.Link{Alpha: 50e-6, Beta: 8e-6} // 1 Mbit/s: saves ~1 s, more than the work even under -race on a loaded machine
	slow.Inter = slow.Intra
	for _, c := range []struct {
		name  string
		model *cost.Model
		want  bool
	}{{"slow link", &slow, true}, {"in-process default", nil, false}} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			var logs []string
			w, err := inproc.NewWorld(ranks, inproc.WithTimeout(20*time.Second))
			require.NoError(t, err)
			conns := make([]transport.Conn, ranks)
			for r := range conns {
				conns[r] = plainConn{w.Conn(r)}
			}
			errs := allreducetest.RunRanks(conns, func(g *allreduce.Group) error {
				logf := func(f string, args ...any) {
					mu.Lock()
					defer mu.Unlock()
					logs = append(logs, fmt.Sprintf(f, args...))
				}
				a, err := NewAutoCompression[float32](BF16, c.model, logf)
				require.NoError(t, err)
				ref, err := NewCompression[float32](BF16, true)
				require.NoError(t, err)
				for s := range 3 {
					buf := make([]float32, n)
					for i := range buf {
						buf[i] = float32(g.Rank()+s+1) * float32(i%13) / 7
					}
					want := append([]float32(nil), buf...)
					b, err := NewGradBucket(g, 0, true, buf, [][]int{{n}})
					require.NoError(t, err)
					require.NoError(t, a.Reduce(context.Background(), b))
					rb, err := NewGradBucket(g, 0, true, want, [][]int{{n}})
					require.NoError(t, err)
					if c.want {
						require.NoError(t, ref.Reduce(context.Background(), rb))
					} else {
						require.NoError(t, allreduce.AllReduce(context.Background(), g, want, allreduce.Avg))
					}
					require.True(t, slices.Equal(want, buf), "step %d: not the chosen hook's result", s)
				}
				got, decided := a.Compresses(0)
				require.True(t, decided)
				require.Equal(t, c.want, got)
				return nil
			})
			require.NoError(t, allreducetest.FirstError(errs))
			require.Len(t, logs, ranks, "one decision logged per rank")
			t.Log(logs[0])
			require.Equal(t, c.want, strings.HasSuffix(logs[0], "compressed to bf16"))
		})
	}
	bad := cost.Model{}
	bad.Intra.Beta = -1
	_, err := NewAutoCompression[float32](BF16, &bad, nil)
	require.ErrorContains(t, err, "cost model")
}
