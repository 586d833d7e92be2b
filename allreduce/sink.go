package allreduce

// copySink copies received bytes into dst.
type copySink struct{ dst []byte }

func (s *copySink) Consume(off int, p []byte) { copy(s.dst[off:], p) }

// Place is where the received bytes go (transport.Placer).
func (s *copySink) Place(n int) []byte { return s.dst[:n] }

// combineSink reduces received bytes with local into out:
// out[i] = local[i] op received[i], or received[i] op local[i] when
// receivedFirst. out may alias local.
type combineSink struct {
	out, local    []byte
	dt            DType
	op            ReduceOp
	receivedFirst bool
}

func (s *combineSink) Consume(off int, p []byte) {
	end := off + len(p)
	if s.receivedFirst {
		combineBytes(s.dt, s.op, s.out[off:end], p, s.local[off:end])
		return
	}
	combineBytes(s.dt, s.op, s.out[off:end], s.local[off:end], p)
}
