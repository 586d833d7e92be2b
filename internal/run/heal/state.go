package heal

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/ringddp/ringddp/numeric"
	"github.com/ringddp/ringddp/optim"
)

// Float is the parameters' element type.
type Float = numeric.Float

// Position is where training stands: the data order's position and the
// running loss of the epoch in progress (the trainer's position).
type Position struct {
	Epoch       int     // 0-based epoch in progress
	StepInEpoch int     // steps of it done
	GlobalStep  int64   // optimizer steps done in all
	LossSum     float64 // the epoch's train-loss sum so far
	LossSteps   int     // steps in LossSum
}

// State is what a replica holds that a joiner needs. A sender fills it
// from its replica (read, never written); a joiner fills the identity and
// sizes it knows — JobID, RunID, Params (its own arena, whose length and
// type must be the senders'), Optim from its fresh optimizer (State():
// its kind), or Optim.Optimizer "" under ZeRO-1 — and Heal fills the rest.
//
// ParamsHeld, set on every rank alike, says that the joiners hold the
// parameters already (ZeRO-1: the re-shard's all-gather assembled them on
// every rank): the stream leaves them out, and the replica check compares
// every rank's own arena all the same.
type State[T Float] struct {
	JobID string // the job's id, the same across restarts
	RunID string // this attempt's rendezvous id
	Position
	Params     []T         // the parameter arena
	ParamsHeld bool        // the joiners hold Params already: not sent, only checked
	Optim      optim.State // the optimizer state over the arena (DDP); Optimizer "" to send none (ZeRO-1)
	RNG        []byte      // RNG state, opaque to Heal
}

// Report is what Heal did.
type Report struct {
	Joiners, Senders []int
	// Sent is, by rank, the state's bytes it sent: a sender's stripes
	// (and for the first sender the header); 0 for a joiner.
	Sent []int64
	// StateBytes is the stream's length: what each joiner received.
	StateBytes int64
	// HeldBytes is the parameters' bytes the stream left out because
	// the joiners held them already (State.ParamsHeld; 0 otherwise).
	HeldBytes int64
	Duration  time.Duration
}

// Limits on a header from the network.
const (
	maxHeaderBytes = 64 << 10
	maxBuffers     = 16
	maxHypers      = 64
	maxNameBytes   = 64
	maxRNGBytes    = 16 << 20
)

// header is the state's description the first sender broadcasts: float
// values as their bits, so that it round-trips bitwise.
type header struct {
	Position  Position `json:"position"`
	LossBits  uint64   `json:"loss_bits"`
	Optimizer string   `json:"optimizer"`
	DType     string   `json:"dtype"`
	Step      int64    `json:"step"`
	Len       int      `json:"len"`
	Hyper     []hyper  `json:"hyper"`
	Buffers   []string `json:"buffers"`
	RNG       int      `json:"rng"`
	// ParamsHeld: the stream leaves the parameters out (State.ParamsHeld).
	ParamsHeld bool `json:"params_held,omitempty"`
}

type hyper struct {
	Name string `json:"name"`
	Bits uint64 `json:"bits"`
}

func headerOf[T Float](st *State[T]) header {
	h := header{Position: st.Position, LossBits: math.Float64bits(st.LossSum), Optimizer: st.Optim.Optimizer,
		DType: st.Optim.DType, Step: st.Optim.Step, Len: st.Optim.Len, RNG: len(st.RNG), ParamsHeld: st.ParamsHeld}
	h.Position.LossSum = 0
	for _, x := range st.Optim.Hyper {
		h.Hyper = append(h.Hyper, hyper{Name: x.Name, Bits: math.Float64bits(x.Value)})
	}
	for _, b := range st.Optim.Buffers {
		h.Buffers = append(h.Buffers, b.Name)
	}
	return h
}

func encodeHeader(h header) ([]byte, error) {
	b, err := json.Marshal(h)
	if err == nil && len(b) > maxHeaderBytes {
		err = fmt.Errorf("heal: the state's header is %d bytes, more than the limit of %d", len(b), maxHeaderBytes)
	}
	return b, err
}

// decodeHeader parses and bounds a header from the network, for a joiner
// whose arena has params elements and whose optimizer is kind ("" for
// none).
func decodeHeader(b []byte, params int, kind string) (header, error) {
	var h header
	if err := json.Unmarshal(b, &h); err != nil {
		return header{}, fmt.Errorf("heal: the state's header does not parse: %w", err)
	}
	switch {
	case kindOf(h.Optimizer, h.DType) != kind:
		return header{}, fmt.Errorf("heal: the state's optimizer is %q, this rank's %q", kindOf(h.Optimizer, h.DType), kind)
	case h.Len != 0 && h.Len != params:
		return header{}, fmt.Errorf("heal: the optimizer state covers %d elements, the arena has %d", h.Len, params)
	case len(h.Buffers) > maxBuffers || len(h.Hyper) > maxHypers:
		return header{}, fmt.Errorf("heal: the state's header has %d buffers and %d hyper-parameters (limits %d, %d)", len(h.Buffers), len(h.Hyper), maxBuffers, maxHypers)
	case h.Len == 0 && len(h.Buffers) > 0:
		return header{}, fmt.Errorf("heal: the state's header has %d buffers of 0 elements", len(h.Buffers))
	case h.RNG < 0 || h.RNG > maxRNGBytes:
		return header{}, fmt.Errorf("heal: the state's RNG is %d bytes (limit %d)", h.RNG, maxRNGBytes)
	case h.Step < 0 || h.Position.GlobalStep < 0 || h.Position.Epoch < 0 || h.Position.StepInEpoch < 0 || h.Position.LossSteps < 0:
		return header{}, fmt.Errorf("heal: the state's header has a negative count: %+v, step %d", h.Position, h.Step)
	}
	for _, s := range append(append([]string(nil), h.Buffers...), h.Optimizer, h.DType) {
		if len(s) > maxNameBytes {
			return header{}, fmt.Errorf("heal: a name in the state's header is %d bytes (limit %d)", len(s), maxNameBytes)
		}
	}
	return h, nil
}

// kindOf names an optimizer kind: "adam/float32", or "" for none.
func kindOf(name, dtype string) string {
	if name == "" {
		return ""
	}
	return name + "/" + dtype
}

// sections are the stream's parts, in order: parameters (unless held),
// each optimizer buffer, RNG.
func sections[T Float](st *State[T]) [][]byte {
	var s [][]byte
	if !st.ParamsHeld {
		s = append(s, bytesOf(st.Params))
	}
	for _, b := range st.Optim.Buffers {
		s = append(s, bytesOf(b.Data))
	}
	return append(s, st.RNG)
}

// bytesOf views s's memory as bytes (the wire is little-endian, as every
// platform the transports run on).
func bytesOf[E any](s []E) []byte {
	if len(s) == 0 {
		return nil
	}
	var e E
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(e)))
}

// digestOf is the SHA-256 of the sections, as 4 words.
func digestOf(parts ...[]byte) [4]int64 {
	h := sha256.New()
	for _, p := range parts {
		_, _ = h.Write(p)
	}
	return words(h.Sum(nil))
}

// words packs a 32-byte digest into 4 words.
func words(sum []byte) [4]int64 {
	var w [4]int64
	for i := range w {
		for j := range 8 {
			w[i] |= int64(sum[8*i+j]) << (8 * j)
		}
	}
	return w
}

// optimDigest is the SHA-256 of an optimizer state: its header and buffers.
func optimDigest(s optim.State) [4]int64 {
	if s.Optimizer == "" {
		return [4]int64{}
	}
	hy := make([]hyper, len(s.Hyper))
	for i, x := range s.Hyper {
		hy[i] = hyper{Name: x.Name, Bits: math.Float64bits(x.Value)}
	}
	h, _ := json.Marshal(struct {
		O, D string
		S    int64
		L    int
		H    []hyper
	}{s.Optimizer, s.DType, s.Step, s.Len, hy})
	parts := [][]byte{h}
	for _, b := range s.Buffers {
		parts = append(parts, []byte(b.Name), bytesOf(b.Data))
	}
	return digestOf(parts...)
}
