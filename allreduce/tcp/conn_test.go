package tcp

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/transport"
)

func TestSendRecvSizes(t *testing.T) {
	conns := dialMesh(t, 2, nil)
	ctx, cancel := ctxT(30 * time.Second)
	defer cancel()
	sizes := []int{0, 1, 7, 8, smallFrame - 1, smallFrame, smallFrame + 1, pieceSize, 2*pieceSize + 5, 3<<20 + 3}
	for i, n := range sizes {
		src := pattern(n, byte(i))
		h := hdr(uint64(i), 0)
		errc := make(chan error, 1)
		go func() { errc <- conns[0].Send(ctx, 1, h, src) }()
		sink := &bufSink{dst: make([]byte, n), record: true}
		if err := conns[1].Recv(ctx, 0, h, n, sink); err != nil {
			t.Fatalf("size %d: Recv: %v", n, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("size %d: Send: %v", n, err)
		}
		if !bytes.Equal(sink.dst, src) {
			t.Fatalf("size %d: payload differs", n)
		}
		total := 0
		for j, p := range sink.pieces {
			if p > pieceSize || (j < len(sink.pieces)-1 && p%8 != 0) {
				t.Fatalf("size %d: piece %d of %d bytes", n, j, p)
			}
			total += p
		}
		if total != n {
			t.Fatalf("size %d: pieces add up to %d", n, total)
		}
	}
}

// TestSelfMessages: a rank may message itself (a ring of one does).
func TestSelfMessages(t *testing.T) {
	conns := dialMesh(t, 2, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	ctx := context.Background()
	for _, size := range []int{0, 5, 3*pieceSize + 1} {
		src := pattern(size, 3)
		sink := &bufSink{dst: make([]byte, size), record: true}
		if err := conns[1].Exchange(ctx, 1, hdr(0, 1), src, 1, hdr(0, 1), size, sink); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(sink.dst, src) {
			t.Fatalf("size %d: payload differs", size)
		}
		errc := make(chan error, 1)
		go func() { errc <- conns[0].Send(ctx, 0, hdr(1, 0), src) }()
		if err := conns[0].Recv(ctx, 0, hdr(1, 0), size, &bufSink{dst: make([]byte, size)}); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// A mismatch reaches both halves; an unmatched send times out.
	err := conns[0].Exchange(ctx, 0, hdr(2, 0), make([]byte, 8), 0, hdr(3, 0), 8, &bufSink{dst: make([]byte, 8)})
	if !errors.Is(err, transport.ErrMismatch) {
		t.Errorf("self mismatch: %v", err)
	}
	if err := conns[1].Send(ctx, 1, hdr(0, 0), []byte("x")); !errors.Is(err, transport.ErrTimeout) {
		t.Errorf("unmatched self send: %v", err)
	}
	if err := conns[1].Recv(ctx, 1, hdr(0, 0), 1, &bufSink{dst: make([]byte, 1)}); !errors.Is(err, transport.ErrTimeout) {
		t.Errorf("unmatched self recv (the timed-out send was taken back): %v", err)
	}
}

// TestOrderAndDirections: many messages each way between every pair arrive
// in order, sent before any is received.
func TestOrderAndDirections(t *testing.T) {
	const n, msgs = 3, 20
	conns := dialMesh(t, n, nil)
	ctx, cancel := ctxT(30 * time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2*n*n)
	for r := 0; r < n; r++ {
		for q := 0; q < n; q++ {
			if q == r {
				continue
			}
			wg.Add(2)
			go func() { // r sends to q
				defer wg.Done()
				for i := 0; i < msgs; i++ {
					if err := conns[r].Send(ctx, q, hdr(uint64(r), uint32(i)), pattern(100+i, byte(r))); err != nil {
						errs <- err
						return
					}
				}
			}()
			go func() { // q receives from r: a Conn is used by one call per link at a time
				defer wg.Done()
				for i := 0; i < msgs; i++ {
					sink := &bufSink{dst: make([]byte, 100+i)}
					if err := conns[q].Recv(ctx, r, hdr(uint64(r), uint32(i)), 100+i, sink); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(sink.dst, pattern(100+i, byte(r))) {
						errs <- errors.New("payload differs")
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestExchangeFullDuplex: both ranks of a pair exchange messages far larger
// than the (shrunk) socket buffers at once; half duplex would deadlock.
func TestExchangeFullDuplex(t *testing.T) {
	for _, n := range []int{2, 3} {
		conns := dialMesh(t, n, func(c *Config) { c.SocketBuffer = 64 << 10 })
		ctx, cancel := ctxT(30 * time.Second)
		const size = 8 << 20
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r := 0; r < n; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				right, left := (r+1)%n, (r+n-1)%n
				sink := &bufSink{dst: make([]byte, size)}
				errs[r] = conns[r].Exchange(ctx, right, hdr(7, 0), pattern(size, byte(r)), left, hdr(7, 0), size, sink)
				if errs[r] == nil && !bytes.Equal(sink.dst, pattern(size, byte(left))) {
					errs[r] = errors.New("payload differs")
				}
			}()
		}
		wg.Wait()
		cancel()
		for r, err := range errs {
			if err != nil {
				t.Errorf("n=%d rank %d: %v", n, r, err)
			}
		}
	}
}

func TestInvalidCalls(t *testing.T) {
	conns := dialMesh(t, 2, func(c *Config) { c.MaxMessage = 1 << 20 })
	ctx := context.Background()
	for name, err := range map[string]error{
		"negative": conns[0].Send(ctx, -1, hdr(0, 0), nil),
		"too big":  conns[0].Send(ctx, 1, hdr(0, 0), make([]byte, 1<<20+1)),
		"recv big": conns[0].Recv(ctx, 1, hdr(0, 0), 1<<20+1, &bufSink{}),
		"beyond":   conns[0].Recv(ctx, 2, hdr(0, 0), 0, &bufSink{}),
		"exchange": conns[0].Exchange(ctx, 1, hdr(0, 0), nil, 5, hdr(0, 0), 0, &bufSink{}),
	} {
		if !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	// The links are still fine.
	errc := make(chan error, 1)
	go func() { errc <- conns[0].Send(ctx, 1, hdr(1, 0), []byte("ok")) }()
	if err := conns[1].Recv(ctx, 0, hdr(1, 0), 2, &bufSink{dst: make([]byte, 2)}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	store := rendezvous.NewMemStore()
	for name, cfg := range map[string]Config{
		"rank >= size":   {Rank: 2, Size: 2, Store: store, Secret: testSecret},
		"no store":       {Rank: 0, Size: 2, Secret: testSecret},
		"no secret":      {Rank: 0, Size: 2, Store: store},
		"bad run id":     {Rank: 0, Size: 2, Store: store, Secret: testSecret, RunID: "a\nb"},
		"bad local rank": {Rank: 0, Size: 2, Store: store, Secret: testSecret, LocalRank: 3, LocalSize: 2},
	} {
		if _, err := Dial(context.Background(), cfg); !errors.Is(err, transport.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	c, err := Dial(context.Background(), Config{Rank: 0, Size: 1})
	if err != nil {
		t.Fatalf("single rank: %v", err)
	}
	if c.Size() != 1 || c.LocalSize() != 1 {
		t.Errorf("single rank: size %d local size %d", c.Size(), c.LocalSize())
	}
	c.Close()
}

func TestTopologyLoopback(t *testing.T) {
	conns := dialMesh(t, 3, nil)
	for r, c := range conns {
		if c.LocalRank() != r || c.LocalSize() != 3 {
			t.Errorf("rank %d: local rank %d of %d, want %d of 3", r, c.LocalRank(), c.LocalSize(), r)
		}
	}
	conns = dialMesh(t, 2, func(c *Config) { c.LocalRank, c.LocalSize = 0, 1 })
	if conns[1].LocalRank() != 0 || conns[1].LocalSize() != 1 {
		t.Errorf("configured topology ignored: %d of %d", conns[1].LocalRank(), conns[1].LocalSize())
	}
}

func TestInsecureOptOut(t *testing.T) {
	conns := dialMesh(t, 2, func(c *Config) { c.Secret, c.Insecure = nil, true })
	errc := make(chan error, 1)
	go func() { errc <- conns[0].Send(context.Background(), 1, hdr(0, 0), []byte("x")) }()
	if err := conns[1].Recv(context.Background(), 0, hdr(0, 0), 1, &bufSink{dst: make([]byte, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestMismatchBothSides: the receiver reports the mismatch, and the sender
// learns it too (from the nack) on its next call.
func TestMismatchBothSides(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sent     transport.Header
		sentLen  int
		want     transport.Header
		wantLen  int
		largeMsg bool
	}{
		{name: "header", sent: hdr(3, 0), sentLen: 64, want: hdr(4, 0), wantLen: 64},
		{name: "length", sent: hdr(3, 0), sentLen: 64, want: hdr(3, 0), wantLen: 72},
		{name: "large", sent: hdr(3, 1), sentLen: 8 << 20, want: hdr(3, 2), wantLen: 8 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conns := dialMesh(t, 2, nil)
			ctx, cancel := ctxT(20 * time.Second)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- conns[0].Send(ctx, 1, tc.sent, make([]byte, tc.sentLen)) }()
			rerr := conns[1].Recv(ctx, 0, tc.want, tc.wantLen, &bufSink{dst: make([]byte, tc.wantLen)})
			var mm *transport.MismatchError
			if !errors.As(rerr, &mm) || mm.Peer != 0 || mm.Local != tc.want || mm.Remote != tc.sent || mm.LocalBytes != tc.wantLen || mm.RemoteBytes != tc.sentLen {
				t.Fatalf("receiver: got %v, want the mismatch with rank 0", rerr)
			}
			serr := <-errc
			if serr == nil {
				// The send completed before the nack arrived: the next
				// call on the link reports it.
				serr = conns[0].Recv(ctx, 1, hdr(9, 9), 0, &bufSink{})
			}
			if !errors.As(serr, &mm) || mm.Peer != 1 || mm.Local != tc.sent || mm.Remote != tc.want || mm.LocalBytes != tc.sentLen || mm.RemoteBytes != tc.wantLen {
				t.Fatalf("sender: got %v, want the mirror mismatch with rank 1", serr)
			}
			// Later calls on the link keep failing the same way.
			if err := conns[1].Recv(ctx, 0, tc.want, 0, &bufSink{}); !errors.Is(err, transport.ErrMismatch) {
				t.Errorf("later receive: got %v", err)
			}
		})
	}
}

// TestAbortReachesPeers: an abort's cause reaches every peer, blocked or not.
func TestAbortReachesPeers(t *testing.T) {
	conns := dialMesh(t, 3, nil)
	ctx, cancel := ctxT(20 * time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- conns[0].Recv(ctx, 2, hdr(0, 0), 10, &bufSink{dst: make([]byte, 10)}) }()
	time.Sleep(50 * time.Millisecond)
	within(t, 5*time.Second, "abort propagation", func() {
		conns[2].Abort(&transport.MismatchError{Peer: 1})
		err := <-errc
		var pe *transport.PeerError
		var ae *AbortError
		if !errors.As(err, &pe) || pe.Peer != 2 || !errors.As(err, &ae) || !strings.Contains(err.Error(), "collective mismatch") {
			t.Errorf("blocked receiver: got %v, want a PeerError for rank 2 with the cause", err)
		}
		if !errors.Is(err, transport.ErrMismatch) || !errors.Is(err, transport.ErrPeer) {
			t.Errorf("abort over a mismatch should read as ErrPeer and ErrMismatch: %v", err)
		}
	})
	// A later call on another rank fails the same way.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := conns[1].Send(ctx, 2, hdr(0, 0), []byte("x"))
		if errors.Is(err, transport.ErrPeer) && strings.Contains(err.Error(), "aborted") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank 1 sending to the aborted rank: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := conns[2].Send(ctx, 0, hdr(0, 0), nil); err == nil || !strings.Contains(err.Error(), "aborted") {
		t.Errorf("aborted rank's own call: %v", err)
	}
	// The rest of the mesh still works.
	go func() { errc <- conns[0].Send(ctx, 1, hdr(1, 0), []byte("hi")) }()
	if err := conns[1].Recv(ctx, 0, hdr(1, 0), 2, &bufSink{dst: make([]byte, 2)}); err != nil {
		t.Errorf("surviving link: %v", err)
	}
	if err := <-errc; err != nil {
		t.Errorf("surviving link: %v", err)
	}
}

// TestPeerDeath: a rank that vanishes without a word fails pending and later
// calls involving it with a PeerError naming it.
func TestPeerDeath(t *testing.T) {
	conns := dialMesh(t, 3, nil)
	ctx, cancel := ctxT(20 * time.Second)
	defer cancel()
	recvErr := make(chan error, 1)
	sendErr := make(chan error, 1)
	go func() { recvErr <- conns[0].Recv(ctx, 2, hdr(0, 0), 10, &bufSink{dst: make([]byte, 10)}) }()
	// A send far larger than the socket buffers blocks until rank 2 reads.
	go func() { sendErr <- conns[1].Send(ctx, 2, hdr(0, 0), make([]byte, 64<<20)) }()
	time.Sleep(100 * time.Millisecond)
	within(t, 5*time.Second, "failure detection", func() {
		conns[2].kill()
		for name, ch := range map[string]chan error{"pending recv": recvErr, "pending send": sendErr} {
			err := <-ch
			var pe *transport.PeerError
			if !errors.As(err, &pe) || pe.Peer != 2 {
				t.Errorf("%s: got %v, want a PeerError for rank 2", name, err)
			}
		}
	})
	if err := conns[0].Send(ctx, 2, hdr(1, 0), []byte("x")); !errors.Is(err, transport.ErrPeer) {
		t.Errorf("later send: %v", err)
	}
	if err := conns[1].Exchange(ctx, 0, hdr(1, 0), nil, 2, hdr(1, 0), 0, &bufSink{}); !errors.Is(err, transport.ErrPeer) {
		t.Errorf("later exchange: %v", err)
	}
}

func TestTimeout(t *testing.T) {
	conns := dialMesh(t, 3, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	ctx := context.Background()
	within(t, 3*time.Second, "recv timeout", func() {
		err := conns[0].Recv(ctx, 1, hdr(0, 0), 10, &bufSink{dst: make([]byte, 10)})
		var te *transport.TimeoutError
		if !errors.As(err, &te) || te.Peer != 1 || te.What != "recv" {
			t.Errorf("recv from a silent peer: got %v, want a TimeoutError", err)
		}
	})
	within(t, 5*time.Second, "send timeout", func() {
		// Rank 1 never reads: after the socket buffers fill, no progress.
		// (Not rank 0: its link to rank 1 failed above and discards.)
		err := conns[2].Send(ctx, 1, hdr(0, 0), make([]byte, 128<<20))
		if !errors.Is(err, transport.ErrTimeout) {
			t.Errorf("send to a peer that does not read: got %v, want ErrTimeout", err)
		}
	})
}

func TestCloseFailsPending(t *testing.T) {
	conns := dialMesh(t, 2, nil)
	ctx := context.Background()
	errc := make(chan error, 2)
	go func() { errc <- conns[0].Recv(ctx, 1, hdr(0, 0), 10, &bufSink{dst: make([]byte, 10)}) }()
	go func() { errc <- conns[0].Send(ctx, 1, hdr(0, 0), make([]byte, 64<<20)) }()
	time.Sleep(50 * time.Millisecond)
	within(t, 5*time.Second, "close", func() {
		conns[0].Close()
		for i := 0; i < 2; i++ {
			if err := <-errc; !errors.Is(err, transport.ErrClosed) {
				t.Errorf("pending call: got %v, want ErrClosed", err)
			}
		}
	})
	if err := conns[0].Send(ctx, 1, hdr(1, 0), nil); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("later call: %v", err)
	}
	// The peer sees this rank gone.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := conns[1].Recv(ctx, 0, hdr(0, 0), 64<<20, &bufSink{dst: make([]byte, 64<<20)})
		if errors.Is(err, transport.ErrPeer) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer of a closed rank: got %v, want ErrPeer", err)
		}
	}
}

func TestContextCancel(t *testing.T) {
	conns := dialMesh(t, 3, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- conns[0].Recv(ctx, 1, hdr(0, 0), 10, &bufSink{dst: make([]byte, 10)}) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// (Rank 0 discards what rank 1 sends now: its receive was abandoned.)
	if err := conns[2].Send(ctx, 1, hdr(0, 0), make([]byte, 64<<20)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("send: got %v, want context.DeadlineExceeded", err)
	}
}

// TestNoAllocs: a steady-state exchange allocates nothing, under every
// wire protection.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, mode := range []WireProtection{WireNone, WireMAC, WireAEAD} {
		t.Run(string(mode), func(t *testing.T) { testNoAllocs(t, mode) })
	}
}

func testNoAllocs(t *testing.T, mode WireProtection) {
	conns := dialMesh(t, 2, func(c *Config) { c.WireProtection = mode })
	ctx := context.Background()
	for _, size := range []int{0, 4 << 10, 1 << 20, 5<<20 + 3} {
		src := [2][]byte{pattern(size, 1), pattern(size, 2)}
		sinks := [2]*bufSink{{dst: make([]byte, size)}, {dst: make([]byte, size)}}
		peerGo := make(chan struct{})
		peerDone := make(chan error)
		go func() {
			for range peerGo {
				err := conns[1].Exchange(ctx, 0, hdr(0, 0), src[1], 0, hdr(0, 0), size, sinks[1])
				if err == nil {
					err = conns[1].Send(ctx, 0, hdr(0, 1), src[1])
				}
				peerDone <- err
			}
		}()
		round := func() {
			peerGo <- struct{}{}
			if err := conns[0].Exchange(ctx, 1, hdr(0, 0), src[0], 1, hdr(0, 0), size, sinks[0]); err != nil {
				t.Fatal(err)
			}
			if err := conns[0].Recv(ctx, 1, hdr(0, 1), size, sinks[0]); err != nil {
				t.Fatal(err)
			}
			if err := <-peerDone; err != nil {
				t.Fatal(err)
			}
		}
		round() // warm up: buffers are allocated on first use
		if a := testing.AllocsPerRun(20, round); a > 0 {
			t.Errorf("size %d: %v allocations per exchange + send/recv (both ranks)", size, a)
		}
		close(peerGo)
	}
}
