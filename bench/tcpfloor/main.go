// Command tcpfloor measures the floor under a ring all-reduce over loopback
// TCP on this host: N processes in a ring, each writing 2(N-1) chunks of
// S/N bytes to its right neighbour while reading as many from its left
// neighbour straight into a destination buffer — the bytes a ring
// all-reduce of S bytes moves, with no framing, no reduction and no copy
// in user space. Whatever a ring all-reduce over TCP costs beyond this is
// the implementation's; this is the kernel's (two copies per byte, the TCP
// stack, scheduling).
//
//	go run ./bench/tcpfloor -ranks 4 -size 64M -iters 10
//
// It prints the time per all-reduce-equivalent and the bus bandwidth it
// implies (as cmd/bench does: S/time · 2(N-1)/N). Socket buffers are set
// as the tcp transport sets them (4 MiB). Ports: -port P uses P..P+N-1.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/ringddp/ringddp/internal/bytesize"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "tcpfloor:", err)
		os.Exit(1)
	}
}

type config struct {
	ranks, rank, iters, port int
	size                     int64
	sockbuf                  int
}

func run(args []string) error {
	fs := flag.NewFlagSet("tcpfloor", flag.ContinueOnError)
	var cfg config
	var size string
	fs.IntVar(&cfg.ranks, "ranks", 4, "processes in the ring")
	fs.IntVar(&cfg.rank, "rank", -1, "internal: this process's rank (the launcher sets it)")
	fs.IntVar(&cfg.iters, "iters", 10, "timed iterations (after one untimed)")
	fs.IntVar(&cfg.port, "port", 29650, "first of the ranks' ports on 127.0.0.1")
	fs.IntVar(&cfg.sockbuf, "sockbuf", 4<<20, "SO_SNDBUF and SO_RCVBUF in bytes (0: the kernel's defaults)")
	fs.StringVar(&size, "size", "64M", "all-reduce size S in bytes (K, M, G suffixes)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := bytesize.Parse(size)
	if err != nil {
		return fmt.Errorf("-size: %w", err)
	}
	cfg.size = int64(s)
	if cfg.ranks < 2 {
		return errors.New("-ranks must be at least 2")
	}
	if cfg.rank < 0 {
		return launch(cfg, args)
	}
	return rank(cfg)
}

// launch starts the ranks as child processes of this binary.
func launch(cfg config, args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmds := make([]*exec.Cmd, cfg.ranks)
	for r := range cmds {
		cmds[r] = exec.Command(self, append([]string{"-rank", strconv.Itoa(r)}, args...)...)
		cmds[r].Stdout, cmds[r].Stderr = os.Stdout, os.Stderr
		cmds[r].Env = append(os.Environ(), "GOMAXPROCS=1")
		if err := cmds[r].Start(); err != nil {
			return err
		}
	}
	var first error
	for r, c := range cmds {
		if err := c.Wait(); err != nil && first == nil {
			first = fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return first
}

func rank(cfg config) error {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(cfg.port+cfg.rank))
	if err != nil {
		return err
	}
	defer ln.Close()
	rightAddr := "127.0.0.1:" + strconv.Itoa(cfg.port+(cfg.rank+1)%cfg.ranks)
	var right net.Conn
	for deadline := time.Now().Add(30 * time.Second); ; {
		if right, err = net.Dial("tcp", rightAddr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer right.Close()
	left, err := ln.Accept()
	if err != nil {
		return err
	}
	defer left.Close()
	if cfg.sockbuf > 0 {
		for _, c := range []net.Conn{left, right} {
			_ = c.(*net.TCPConn).SetReadBuffer(cfg.sockbuf)
			_ = c.(*net.TCPConn).SetWriteBuffer(cfg.sockbuf)
		}
	}
	chunk := int(cfg.size) / cfg.ranks
	steps := 2 * (cfg.ranks - 1)
	src := make([]byte, cfg.size)
	dst := make([]byte, cfg.size)
	const writeChunk, readPiece = 4 << 20, 256 << 10 // as the tcp transport
	op := func() error {
		var wg sync.WaitGroup
		var werr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := 0; s < steps; s++ {
				c := (cfg.rank - s + 2*cfg.ranks) % cfg.ranks * chunk
				for off := 0; off < chunk && werr == nil; off += writeChunk {
					_, werr = right.Write(src[c+off : c+min(off+writeChunk, chunk)])
				}
			}
		}()
		var rerr error
		for s := 0; s < steps && rerr == nil; s++ {
			c := (cfg.rank - s - 1 + 2*cfg.ranks) % cfg.ranks * chunk
			for off := 0; off < chunk && rerr == nil; off += readPiece {
				_, rerr = io.ReadFull(left, dst[c+off:c+min(off+readPiece, chunk)])
			}
		}
		wg.Wait()
		return errors.Join(werr, rerr)
	}
	if err := op(); err != nil {
		return err
	}
	start := time.Now()
	for i := 0; i < cfg.iters; i++ {
		if err := op(); err != nil {
			return err
		}
	}
	if cfg.rank == 0 {
		per := time.Since(start) / time.Duration(cfg.iters)
		busbw := float64(cfg.size) / per.Seconds() * float64(steps) / float64(cfg.ranks) / 1e9
		fmt.Printf("tcpfloor: %d ranks, %s: %.2f µs per all-reduce-equivalent, busbw %.2f GB/s\n",
			cfg.ranks, bytesize.Format(int(cfg.size)), float64(per.Nanoseconds())/1e3, busbw)
	}
	return nil
}
