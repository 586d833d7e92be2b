package main

import (
	"context"
	"fmt"

	"github.com/ringddp/ringddp/allreduce/sim"
	"github.com/ringddp/ringddp/allreduce/transport"
	"github.com/ringddp/ringddp/internal/run/launch"
)

// fleet is one sweep's endpoints: this process's ranks, and with
// -transport sim the simulated world they live in.
type fleet struct {
	conns []transport.Conn
	world *sim.World // -transport sim; nil otherwise
}

// closeConns closes the endpoints (for a sweep's conns the groups do it)
// and the simulated world.
func (f fleet) closeConns() {
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.closeWorld()
}

// closeWorld releases the simulated world (its virtual arena).
func (f fleet) closeWorld() {
	if f.world != nil {
		_ = f.world.Close()
	}
}

// endpoints hands out a fleet for each sweep (each algorithm): a fresh
// world of in-process or simulated ranks every time; over tcp this
// process's one rank, connected once for the whole run and shared by the
// sweeps' groups (sharedConn).
type endpoints struct {
	cfg *config
	tcp *launch.Conn
}

// openEndpoints connects this process's tcp rank; in process it does
// nothing yet.
func openEndpoints(ctx context.Context, cfg *config) (*endpoints, error) {
	e := &endpoints{cfg: cfg}
	if cfg.mp == nil {
		return e, nil
	}
	conns, err := cfg.tr.Connect(ctx, cfg.ranks)
	if err != nil {
		return nil, fmt.Errorf("-transport %s: %w", cfg.transport, err)
	}
	c, ok := conns[0].(*launch.Conn)
	if !ok {
		_ = conns[0].Close()
		return nil, fmt.Errorf("-transport %s: endpoint %T, want a *launch.Conn", cfg.transport, conns[0])
	}
	e.tcp = c
	if err := cfg.timeline.syncClock(ctx, c); err != nil {
		_ = c.Close()
		return nil, err
	}
	return e, nil
}

// next returns the endpoints of the next sweep.
func (e *endpoints) next(ctx context.Context) (fleet, error) {
	cfg := e.cfg
	switch {
	case e.tcp != nil:
		return fleet{conns: []transport.Conn{sharedConn{e.tcp}}}, nil
	case cfg.transport == simTransport:
		w, err := sim.NewWorld(simConfig(cfg))
		if err != nil {
			return fleet{}, fmt.Errorf("-transport %s: %w", simTransport, err)
		}
		return fleet{conns: w.Endpoints(), world: w}, nil
	}
	conns, err := cfg.tr.Connect(ctx, cfg.ranks)
	if err != nil {
		return fleet{}, fmt.Errorf("-transport %s: %w", cfg.transport, err)
	}
	return fleet{conns: conns}, nil
}

// close closes the tcp endpoint, if any.
func (e *endpoints) close() {
	if e.tcp != nil {
		_ = e.tcp.Close()
	}
}

// sharedConn is the tcp endpoint as one sweep's group sees it: every
// method of the endpoint (Exchange, Abort, NodeName, ... promoted) except
// Close, which leaves it open for the next sweep's group. The sweeps run
// one after another and every rank finishes a sweep's collectives before
// it starts the next one's; the endpoint delivers each peer's messages in
// order, so a new group's first message (sequence 0 again) never meets
// an old one's.
type sharedConn struct{ *launch.Conn }

// Close does nothing: the endpoint outlives the group (endpoints.close).
func (sharedConn) Close() error { return nil }
