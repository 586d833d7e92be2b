// Package mixed is a transport.Conn for a job whose ranks are processes
// on several hosts, some hosts running several: it holds two endpoints of
// this rank, one of a shared-memory world of this host's ranks (package
// shm) and one of a TCP mesh of every rank (package tcp), and routes each
// message by its peer's host, so ranks on this host exchange through
// shared memory and ranks elsewhere over TCP.
//
// The shm world numbers its own ranks 0..k-1 (this host's ranks in world
// rank order); Conn maps world ranks to them and back, errors included, so
// callers only ever see world ranks. Per-pair ordering, mismatch errors and
// timeouts are those of the endpoint that carries the pair: a pair always
// takes the same one. An Exchange whose two peers take different
// endpoints runs the send on a second goroutine while the caller
// receives; Abort and Close end both endpoints.
//
// Dial forms both from one tcp.Config and the hosts of every rank (which
// the launcher learns from the rendezvous: internal/run/launch's -transport
// auto); New composes endpoints that are already connected.
package mixed
