package ddp

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ringddp/ringddp/allreduce/cost"
)

// CompressSpec is a choice of communication hook as the commands spell
// it (cmd/train's -compress):
//
//	none              the plain all-reduce (Avg)
//	fp16, bf16        Compression with error feedback
//	powersgd[:r[:s]]  PowerSGD of rank r (default 1) from step s (default
//	                  DefaultPowerSGDStart), PyTorch's other defaults
//	auto              AutoCompression to bf16
type CompressSpec struct {
	Kind      string // "none", "fp16", "bf16", "powersgd" or "auto"
	Rank      int    // powersgd: the rank r
	StartIter int    // powersgd: the first compressed step
}

// DefaultPowerSGDStart is the first compressed step of a powersgd spec
// that names none. PyTorch's default, 1000, is more steps than a few
// epochs of the MLP take; PyTorch's guide suggests starting once the
// first steps' large changes are over, which on the MLP is after tens of
// steps.
const DefaultPowerSGDStart = 10

// ParseCompress parses a CompressSpec; "" is none.
func ParseCompress(s string) (CompressSpec, error) {
	kind, rest, hasArgs := strings.Cut(s, ":")
	switch kind {
	case "", "none", "fp16", "bf16", "auto":
		if hasArgs {
			return CompressSpec{}, fmt.Errorf("compression %q takes no arguments (only powersgd[:rank[:start]] does)", s)
		}
		if kind == "" {
			kind = "none"
		}
		return CompressSpec{Kind: kind}, nil
	case "powersgd":
	default:
		return CompressSpec{}, fmt.Errorf("unknown compression %q (want none, fp16, bf16, powersgd[:rank[:start]] or auto)", s)
	}
	c := CompressSpec{Kind: kind, Rank: 1, StartIter: DefaultPowerSGDStart}
	if !hasArgs {
		return c, nil
	}
	args := strings.Split(rest, ":")
	if len(args) > 2 {
		return CompressSpec{}, fmt.Errorf("compression %q: want powersgd[:rank[:start]]", s)
	}
	var err error
	if c.Rank, err = strconv.Atoi(args[0]); err != nil || c.Rank < 1 {
		return CompressSpec{}, fmt.Errorf("compression %q: PowerSGD rank %q is not a whole number ≥ 1", s, args[0])
	}
	if len(args) == 2 {
		if c.StartIter, err = strconv.Atoi(args[1]); err != nil || c.StartIter < 0 {
			return CompressSpec{}, fmt.Errorf("compression %q: PowerSGD start step %q is not a whole number ≥ 0", s, args[1])
		}
	}
	return c, nil
}

func (c CompressSpec) String() string {
	if c.Kind == "powersgd" {
		return fmt.Sprintf("powersgd:%d:%d", c.Rank, c.StartIter)
	}
	return c.Kind
}

// NewCompressHook is the hook c names for one DDP; nil for none. model
// and logf are AutoCompression's (see NewAutoCompression).
func NewCompressHook[T Float](c CompressSpec, model *cost.Model, logf func(format string, args ...any)) (CommHook[T], error) {
	switch c.Kind {
	case "", "none":
		return nil, nil
	case "fp16":
		return NewCompression[T](FP16, true)
	case "bf16":
		return NewCompression[T](BF16, true)
	case "auto":
		return NewAutoCompression[T](BF16, model, logf)
	case "powersgd":
		cfg := DefaultPowerSGDConfig()
		cfg.Rank, cfg.StartIter = c.Rank, c.StartIter
		return NewPowerSGD[T](cfg)
	}
	return nil, fmt.Errorf("ddp: unknown compression %q", c.Kind)
}
