//go:build linux

package shm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/allreducetest"
	"github.com/ringddp/ringddp/allreduce/rendezvous"
	"github.com/ringddp/ringddp/allreduce/shm"
	"github.com/ringddp/ringddp/allreduce/transport"
)

// TestCorruptSlot: a slot whose header was changed after the sender
// published it — any byte of the header, or the payload length beyond the
// slot — is an error wrapping ErrCorrupt and ErrPeer on the receiver,
// never a panic, and the sink gets nothing.
func TestCorruptSlot(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(h []byte)
	}{
		{"flipped-bit", func(h []byte) { h[20] ^= 1 }},
		{"checksum", func(h []byte) { h[125] ^= 0xff }},
		{"reserved-byte", func(h []byte) { h[100] = 1 }}, // outside the checksum: checked to be 0
		{"huge-piece-recrc", func(h []byte) {
			binary.LittleEndian.PutUint32(h[64:], 1<<31)
			binary.LittleEndian.PutUint32(h[124:], crc(h[:68]))
		}},
		{"wrong-seq-recrc", func(h []byte) {
			binary.LittleEndian.PutUint64(h[8:], 7)
			binary.LittleEndian.PutUint32(h[124:], crc(h[:68]))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conns := shmConns(t, 2)
			ctx, cancel := ctxT(5 * time.Second)
			defer cancel()
			p := bytes.Repeat([]byte{7}, 1000)
			if err := conns[0].Send(ctx, 1, hdr(0, 0), p); err != nil {
				t.Fatal(err)
			}
			mem := shm.OwnMemory(conns[1])
			off := shm.SlotOffset(conns[1], 0, 0)
			c.mod(mem[off : off+128])
			sink := &bufSink{dst: make([]byte, 1000)}
			err := conns[1].Recv(ctx, 0, hdr(0, 0), 1000, sink)
			if !errors.Is(err, shm.ErrCorrupt) || !errors.Is(err, transport.ErrPeer) {
				t.Fatalf("Recv of a corrupted slot: %v, want ErrCorrupt and ErrPeer", err)
			}
			if !bytes.Equal(sink.dst, make([]byte, 1000)) {
				t.Errorf("the sink got bytes of a corrupted slot")
			}
			t.Logf("%v", err)
		})
	}
}

// TestCorruptHead: a ring index moved beyond the ring is an error.
func TestCorruptHead(t *testing.T) {
	conns := shmConns(t, 2)
	ctx, cancel := ctxT(5 * time.Second)
	defer cancel()
	mem := shm.OwnMemory(conns[1])
	binary.LittleEndian.PutUint64(mem[shm.HeadOffset(conns[1], 0):], 1<<40)
	err := conns[1].Recv(ctx, 0, hdr(0, 0), 8, &bufSink{dst: make([]byte, 8)})
	if !errors.Is(err, shm.ErrCorrupt) {
		t.Fatalf("Recv with a corrupted head: %v, want ErrCorrupt", err)
	}
}

// TestWrongSecret: a rank with another secret cannot join: it is refused
// before any descriptor is passed, and the rank it dialed reports it at
// once (the process, why), says whom it still waits for, and names the
// process in its error.
func TestWrongSecret(t *testing.T) {
	store := rendezvous.NewMemStore()
	errs := make([]error, 2)
	var mu sync.Mutex
	var lines []string
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := secret
			if r == 1 {
				s = []byte("another secret entirely 98765")
			}
			cfg := shm.Config{Rank: r, Size: 2, Store: store, Secret: s, ConnectTimeout: 2 * time.Second, Slots: 2, SlotSize: 4096,
				Log: func(l string) {
					mu.Lock()
					lines = append(lines, l)
					mu.Unlock()
				}}
			if r == 1 {
				cfg.Log = func(string) {}
			}
			shm.SetProgressEvery(&cfg, 500*time.Millisecond)
			c, err := shm.Dial(context.Background(), cfg)
			if c != nil {
				c.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	if !errors.Is(errs[1], shm.ErrAuth) {
		t.Errorf("rank 1 (wrong secret): %v, want ErrAuth", errs[1])
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "secret") {
		t.Errorf("rank 0: %v, want an error naming the secret", errs[0])
	}
	t.Logf("rank 0: %v\nrank 1: %v", errs[0], errs[1])
	t.Logf("rank 0 printed:\n%s", strings.Join(lines, "\n"))
	from := fmt.Sprintf("pid %d (uid %d)", os.Getpid(), os.Getuid())
	if len(lines) == 0 || lines[0] != "shm: rank 0: turned away a connection from "+from+": authentication failed (wrong secret?)" {
		t.Errorf("rank 0 printed %q first, want the refusal naming the process", lines)
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "shm: rank 0: still waiting for rank(s) 1 (") }) {
		t.Error("rank 0 did not say whom it waits for")
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "turned away 1 connection(s) before they authenticated, the latest from "+from) {
		t.Errorf("rank 0: %v, want it to name the process turned away", errs[0])
	}
}

// TestStrangerGetsNoDescriptor: a process that connects to a rank's
// socket without the secret is refused and receives no descriptor.
func TestStrangerGetsNoDescriptor(t *testing.T) {
	store := rendezvous.NewMemStore()
	done := make(chan error, 1)
	go func() {
		c, err := shm.Dial(context.Background(), shm.Config{Rank: 0, Size: 2, Store: store, Secret: secret,
			ConnectTimeout: 3 * time.Second, Slots: 2, SlotSize: 4096})
		if c != nil {
			c.Close()
		}
		done <- err
	}()
	ctx, cancel := ctxT(3 * time.Second)
	defer cancel()
	name, err := store.Get(ctx, "ringddp/shm/default/addr/0")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("unix", string(name))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	uc := nc.(*net.UnixConn)
	_ = uc.SetDeadline(time.Now().Add(2 * time.Second))
	hello := make([]byte, 40)
	if _, err := uc.Read(hello); err != nil {
		t.Fatal(err)
	}
	answer := make([]byte, 348)
	copy(answer, hello[:8]) // the right magic, version and mode; a made-up proof
	if _, err := uc.Write(answer); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 512)
	oob := make([]byte, 512)
	total, oobTotal := 0, 0
	for {
		n, oobn, _, _, err := uc.ReadMsgUnix(got, oob)
		total, oobTotal = total+n, oobTotal+oobn
		if err != nil {
			break
		}
	}
	if oobTotal != 0 {
		t.Errorf("a stranger received %d bytes of ancillary data", oobTotal)
	}
	if total == 0 || got[0] != 1 || !strings.Contains(string(got[3:total]), "secret") {
		t.Errorf("a stranger got %q, want a refusal naming the secret", got[:total])
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "secret") {
		t.Errorf("rank 0: %v, want a timeout naming the stranger's failed proof", err)
	}
}

// TestKillMidAllReduce: a rank whose sockets drop without a word in the
// middle of an all-reduce (as a crashed process's would) makes every
// other rank fail within a second, naming it.
func TestKillMidAllReduce(t *testing.T) {
	const n, victim = 4, 2
	conns := shmConnsWith(t, n, func(c *shm.Config) { c.Timeout = 20 * time.Second })
	errs, returned := allreducetest.KillMidAllReduce(allreducetest.Conns(conns), victim, func() { shm.Kill(conns[victim]) },
		allreduce.WithAlgorithm(allreduce.Ring))
	for r, err := range errs {
		if r == victim {
			continue
		}
		if !errors.Is(err, transport.ErrPeer) || !strings.Contains(err.Error(), "rank 2") {
			t.Errorf("rank %d: %v, want a peer failure naming rank 2", r, err)
		}
		if returned[r] > time.Second {
			t.Errorf("rank %d failed %v after the kill", r, returned[r])
		}
		t.Logf("rank %d after %v: %v", r, returned[r], err)
	}
}

// TestNothingLeftBehind: after Close no memfd is mapped or open in this
// process, and Dial never made anything in /dev/shm.
func TestNothingLeftBehind(t *testing.T) {
	before := devShm(t)
	conns := shmConns(t, 3)
	if got := memfds(t); got == 0 {
		t.Fatalf("no ringddp memfd mapped while the world is up")
	}
	if fds := memfdDescriptors(t); fds != 0 {
		t.Errorf("%d memfd descriptors open after Dial (want only mappings)", fds)
	}
	for _, c := range conns {
		c.Close()
	}
	if got := memfds(t); got != 0 {
		t.Errorf("%d ringddp memfd mappings left after Close", got)
	}
	if fds := memfdDescriptors(t); fds != 0 {
		t.Errorf("%d memfd descriptors left after Close", fds)
	}
	if after := devShm(t); after != before {
		t.Errorf("/dev/shm changed: %q before, %q after", before, after)
	}
}

func memfds(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	return strings.Count(string(b), "memfd:ringddp-shm")
}

func memfdDescriptors(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.Contains(l, "memfd:") {
			n++
		}
	}
	return n
}

func devShm(t *testing.T) string {
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		return ""
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return strings.Join(names, ",")
}

// TestMissingRank: a rank that never calls the collective the others are
// in is named, with the call, in every other rank's error: the stall
// notices go through the files' stall blocks.
func TestMissingRank(t *testing.T) {
	const timeout = time.Second
	for _, tc := range []struct {
		n, missing int
		algo       allreduce.Algorithm
	}{{4, 1, allreduce.Ring}, {3, 2, allreduce.Tree}} {
		t.Run(fmt.Sprintf("n=%d/missing=%d/%v", tc.n, tc.missing, tc.algo), func(t *testing.T) {
			t.Parallel()
			conns := shmConnsWith(t, tc.n, func(c *shm.Config) { c.Timeout = timeout })
			if err := allreducetest.MissingRank(allreducetest.Conns(conns), tc.missing, 1<<16, timeout, allreduce.WithAlgorithm(tc.algo)); err != nil {
				t.Error(err)
			}
		})
	}
}
