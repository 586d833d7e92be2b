package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

var testSecret = []byte("rendezvous test secret")

func testStoreConfig() StoreConfig {
	return StoreConfig{Secret: testSecret, Timeout: 10 * time.Second}
}

// storeKinds makes fresh stores of each implementation; timeout bounds Gets.
var storeKinds = map[string]func(t *testing.T, timeout time.Duration) Store{
	"mem": func(t *testing.T, timeout time.Duration) Store {
		m := NewMemStore()
		m.Timeout = timeout
		t.Cleanup(func() { m.Close() })
		return m
	},
	"tcp": func(t *testing.T, timeout time.Duration) Store {
		cfg := testStoreConfig()
		srv, err := ListenStore("127.0.0.1:0", cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		cfg.Timeout = timeout
		c, err := DialStore(context.Background(), srv.Addr().String(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	},
}

func TestStoreSemantics(t *testing.T) {
	for name, mk := range storeKinds {
		t.Run(name, func(t *testing.T) {
			s := mk(t, 5*time.Second)
			ctx := context.Background()
			if err := s.Set(ctx, "a", []byte("one")); err != nil {
				t.Fatal(err)
			}
			v, err := s.Get(ctx, "a")
			if err != nil || string(v) != "one" {
				t.Fatalf("Get = %q, %v", v, err)
			}
			v[0] = 'X' // the caller owns what Get returns
			if v, _ := s.Get(ctx, "a"); string(v) != "one" {
				t.Fatalf("store aliased a returned value: %q", v)
			}
			if err := s.Set(ctx, "a", nil); err != nil {
				t.Fatal(err)
			}
			if v, err := s.Get(ctx, "a"); err != nil || len(v) != 0 {
				t.Fatalf("empty value: %q, %v", v, err)
			}
			for _, key := range []string{"", string(make([]byte, MaxKeyLen+1))} {
				if err := s.Set(ctx, key, nil); !errors.Is(err, ErrInvalid) {
					t.Errorf("key of %d bytes: %v", len(key), err)
				}
			}
			// Counters.
			for i, want := range []int64{5, 2, 2, -10} {
				delta := []int64{5, -3, 0, -12}[i]
				if got, err := s.Add(ctx, "n", delta); err != nil || got != want {
					t.Fatalf("Add(%d) = %d, %v; want %d", delta, got, err, want)
				}
			}
			if v, _ := s.Get(ctx, "n"); string(v) != "-10" {
				t.Errorf("counter reads %q", v)
			}
			if _, err := s.Add(ctx, "a", 1); err == nil {
				// "a" is empty, not a number
				t.Error("Add on a non-counter succeeded")
			}
			_ = s.Set(ctx, "text", []byte("hello"))
			if _, err := s.Add(ctx, "text", 1); !errors.Is(err, ErrNotCounter) {
				t.Errorf("Add on text: %v", err)
			}
		})
	}
}

func TestStoreBlockingGet(t *testing.T) {
	for name, mk := range storeKinds {
		t.Run(name, func(t *testing.T) {
			s := mk(t, 5*time.Second)
			ctx := context.Background()
			got := make(chan string, 1)
			go func() {
				v, err := s.Get(ctx, "late")
				if err != nil {
					got <- err.Error()
					return
				}
				got <- string(v)
			}()
			time.Sleep(100 * time.Millisecond)
			select {
			case v := <-got:
				t.Fatalf("Get returned %q before the key was set", v)
			default:
			}
			// A Set on another key does not wake it wrongly, and does not
			// wait behind the blocked Get.
			start := time.Now()
			if err := s.Set(ctx, "other", []byte("x")); err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el > time.Second {
				t.Errorf("Set waited %v behind a blocked Get", el)
			}
			if err := s.Set(ctx, "late", []byte("here")); err != nil {
				t.Fatal(err)
			}
			select {
			case v := <-got:
				if v != "here" {
					t.Fatalf("Get = %q", v)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Get did not wake")
			}
		})
	}
}

func TestStoreTimeouts(t *testing.T) {
	for name, mk := range storeKinds {
		t.Run(name, func(t *testing.T) {
			s := mk(t, 200*time.Millisecond)
			start := time.Now()
			_, err := s.Get(context.Background(), "never")
			if !errors.Is(err, ErrTimeout) {
				t.Errorf("store timeout: got %v, want ErrTimeout", err)
			}
			if el := time.Since(start); el < 150*time.Millisecond || el > 3*time.Second {
				t.Errorf("store timeout after %v, want about 200ms", el)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start = time.Now()
			_, err = s.Get(ctx, "never")
			if err == nil || time.Since(start) > 3*time.Second {
				t.Errorf("context deadline: got %v after %v", err, time.Since(start))
			}
			ctx, cancel = context.WithCancel(context.Background())
			go func() { time.Sleep(30 * time.Millisecond); cancel() }()
			if _, err := s.Get(ctx, "never"); !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled: got %v, want context.Canceled", err)
			}
			// The store still works afterwards.
			if err := s.Set(context.Background(), "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			if v, err := s.Get(context.Background(), "k"); err != nil || string(v) != "v" {
				t.Fatalf("after timeouts: %q, %v", v, err)
			}
		})
	}
}

// TestStoreAddAtomic: concurrent Adds from many clients never lose an
// increment, and every caller sees a distinct result.
func TestStoreAddAtomic(t *testing.T) {
	for name, mk := range storeKinds {
		t.Run(name, func(t *testing.T) {
			const clients, adds = 8, 40
			stores := []Store{mk(t, 5*time.Second)}
			if name == "tcp" {
				addr := stores[0].(*TCPStore).Addr()
				for i := 1; i < clients; i++ {
					c, err := DialStore(context.Background(), addr, testStoreConfig())
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { c.Close() })
					stores = append(stores, c)
				}
			}
			var mu sync.Mutex
			var seen []int64
			var wg sync.WaitGroup
			for i := 0; i < clients; i++ {
				s := stores[i%len(stores)]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := 0; j < adds; j++ {
						v, err := s.Add(context.Background(), "ctr", 1)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						seen = append(seen, v)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			slices.Sort(seen)
			for i, v := range seen {
				if v != int64(i+1) {
					t.Fatalf("results %v...: want exactly 1..%d", seen[:min(len(seen), 10)], clients*adds)
				}
			}
			if len(seen) != clients*adds {
				t.Fatalf("%d results", len(seen))
			}
		})
	}
}

func TestMemStoreClose(t *testing.T) {
	m := NewMemStore()
	errc := make(chan error, 1)
	go func() {
		_, err := m.Get(context.Background(), "x")
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	m.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("waiting Get: %v", err)
	}
	if err := m.Set(context.Background(), "x", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Set after Close: %v", err)
	}
}

func ExampleMemStore() {
	s := NewMemStore()
	ctx := context.Background()
	go s.Set(ctx, "rank0/addr", []byte("127.0.0.1:29500"))
	v, _ := s.Get(ctx, "rank0/addr") // waits for the Set
	n, _ := s.Add(ctx, "joined", 1)
	fmt.Println(string(v), n)
	// Output: 127.0.0.1:29500 1
}
