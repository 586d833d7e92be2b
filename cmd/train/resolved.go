package main

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/allreduce/mixed"
	"github.com/ringddp/ringddp/allreduce/shm"
	"github.com/ringddp/ringddp/allreduce/tcp"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/bytesize"
	"github.com/ringddp/ringddp/internal/run/launch"
	"github.com/ringddp/ringddp/internal/run/trainer"
)

// What the "auto" choices of a run resolved to, for the plan line:
// -transport auto's transport (what this rank dialled), and the
// gradient buckets' all-reduce algorithm (what the rank's group picks for
// each bucket size under its cost model: the -profile or the transport's
// default model). The plan names both, and the model.

// connectFunc is trainer.Config.Connect.
type connectFunc func(ctx context.Context, ranks int) ([]transport.Conn, error)

// keepConn wraps connect so that the first endpoint it returns is kept in
// *first, for the plan line (trainer.Run connects before OnStart).
func keepConn(connect connectFunc, first *transport.Conn) connectFunc {
	return func(ctx context.Context, ranks int) ([]transport.Conn, error) {
		conns, err := connect(ctx, ranks)
		if err == nil && len(conns) > 0 {
			*first = conns[0]
		}
		return conns, err
	}
}

// transportLabel is the transport the plan names: -transport as given,
// and for auto what this rank dialled, with why (note, "" if none).
func transportLabel(name string, c transport.Conn) (label, note string) {
	if name != launch.Auto {
		return name, ""
	}
	lc, ok := c.(*launch.Conn)
	if !ok {
		return name, ""
	}
	switch lc.Endpoint.(type) {
	case *shm.Conn:
		return "shm", " (-transport auto: every rank on this host)"
	case *tcp.Conn:
		return "tcp", " (-transport auto: a host per rank)"
	case *mixed.Conn:
		return "shm+tcp", " (-transport auto: shm within hosts, tcp between)"
	}
	return name, ""
}

// modelLabel names the cost model auto chooses by: the -profile file, or
// the default model cost.DefaultModelFor gives the endpoint's transport
// (the three cases of its shape: shared memory lending copies, peer
// memory in place, messages only).
func modelLabel(profile string, c transport.Conn) string {
	if profile != "" {
		return "profile " + profile
	}
	switch _, most, ok := allreduce.PeerMemoryOf(c); {
	case !ok:
		return "the default model for message-passing ranks (tcp)"
	case most == math.MaxInt:
		return "the default model for in-process ranks"
	}
	return "the default model for shared-memory ranks (shm)"
}

// algorithmLine is the plan's all-reduce line: the algorithm the group of
// endpoint c runs for the buckets of p (asked with -algo, or auto's pick),
// and for auto the cost model it picked by. One bucket: the algorithm of
// its size. Several: the rule by size, from 8 B to all the parameters'
// bytes (a bucket holds at most -bucket-mb, the first 1 MiB, unless one
// parameter is larger). When this rank's host holds fewer ranks than the
// world (its endpoint's LocalSize), auto picks again at the first call,
// from the hosts' topology, which it does not know yet; the line says so.
// ZeRO-1 reduce-scatters and
// all-gathers instead, by the ring: auto picks nothing else for them
// (halving-doubling runs only when asked, which the trainer does not).
func algorithmLine(p trainer.Plan, o *options, c transport.Conn) string {
	if o.cfg.Zero1 {
		return "ZeRO-1: gradients reduce-scattered and parameters all-gathered by the ring (auto's only pick for them; -algo applies to all-reduce only)"
	}
	if c == nil {
		return ""
	}
	g, err := allreduce.NewGroup(c, o.cfg.GroupOptions...) // only asked what it would pick: never called, never closed
	if err != nil {
		return fmt.Sprintf("all-reduce: %v", err)
	}
	var b strings.Builder
	auto := o.algo == "" || o.algo == allreduce.Auto.String()
	if auto {
		b.WriteString("all-reduce algorithm auto, by " + modelLabel(o.profile, c) + ": ")
	} else {
		b.WriteString("all-reduce algorithm -algo " + o.algo + ": ")
	}
	if p.Buckets <= 1 {
		fmt.Fprintf(&b, "%s for the one bucket (%s)", g.AlgorithmFor(int(p.ParamBytes)), humanBytes(p.ParamBytes))
	} else {
		fmt.Fprintf(&b, "%d buckets, by size: %s", p.Buckets, algorithmRule(g, int(p.ParamBytes)))
	}
	if ls, ok := c.(interface{ LocalSize() int }); ok && auto && ls.LocalSize() < c.Size() {
		b.WriteString(" (for ranks on one host; across hosts auto picks again at the first call, from the hosts' topology)")
	}
	return b.String()
}

// algorithmRule is what g runs by size, from 8 B to largest bytes, in
// the size classes auto picks by ([2^k, 2^(k+1)) bytes): "direct below
// 64KiB, ring up to 0.90 MiB".
func algorithmRule(g *allreduce.Group, largest int) string {
	var parts []string
	cur := g.AlgorithmFor(8)
	for b := 16; ; b *= 2 {
		end := b >= largest
		if end {
			b = largest
		}
		if a := g.AlgorithmFor(b); a != cur {
			parts = append(parts, fmt.Sprintf("%s below %s", cur, bytesize.Format(b)))
			cur = a
		}
		if end {
			break
		}
	}
	return strings.Join(append(parts, fmt.Sprintf("%s up to %s", cur, humanBytes(int64(largest)))), ", ")
}
