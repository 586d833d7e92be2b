package rendezvous

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkStoreSetGet measures the store's request rate: one client
// sets and then gets a key, one round trip each, over loopback, with a
// secret (frames sealed) and without (insecure, frames bare). One
// iteration is two requests.
func BenchmarkStoreSetGet(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  StoreConfig
	}{{"secret", testStoreConfig()}, {"insecure", StoreConfig{Insecure: true}}} {
		for _, size := range []int{16, 64 << 10} {
			b.Run(fmt.Sprintf("%s/value=%d", c.name, size), func(b *testing.B) {
				srv, err := ListenStore("127.0.0.1:0", c.cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer srv.Close()
				ctx := context.Background()
				cl, err := DialStore(ctx, srv.Addr().String(), c.cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer cl.Close()
				val := make([]byte, size)
				b.SetBytes(int64(2 * size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := cl.Set(ctx, "bench/key", val); err != nil {
						b.Fatal(err)
					}
					if v, err := cl.Get(ctx, "bench/key"); err != nil || len(v) != size {
						b.Fatalf("Get: %d bytes, %v", len(v), err)
					}
				}
				b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "requests/s")
			})
		}
	}
}
