//go:build linux

package shm

import "time"

// Kill drops c's sockets without a status, as a crashed process would.
func Kill(c *Conn) { c.kill() }

// OwnMemory is c's own file's mapping (the rings into c), for tests that
// corrupt it.
func OwnMemory(c *Conn) []byte { return c.own.mem }

// SlotOffset is where slot k of the ring from peer sits in c's own file.
func SlotOffset(c *Conn, peer, k int) int64 {
	return c.own.lay.slotAt(ringIndex(c.rank, peer), k)
}

// HeadOffset is where the head of the ring from peer sits in c's own file.
func HeadOffset(c *Conn, peer int) int64 {
	return c.own.lay.controlAt(ringIndex(c.rank, peer)) + headOff
}

// SetProgressEvery sets how often Dial says whom it still waits for.
func SetProgressEvery(c *Config, d time.Duration) { c.progressEvery = d }
