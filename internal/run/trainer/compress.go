package trainer

import (
	"fmt"
	"os"

	"github.com/ringddp/ringddp/allreduce"
	"github.com/ringddp/ringddp/ddp"
)

// checkCompress validates Compress: a spec ddp.ParseCompress accepts, and
// none with Zero1 (whose buckets are reduce-scattered, not all-reduced).
func (c Config) checkCompress() error {
	spec, err := ddp.ParseCompress(c.Compress)
	switch {
	case err != nil:
		return fmt.Errorf("trainer: compress: %w", err)
	case spec.Kind != "none" && c.Zero1:
		return fmt.Errorf("trainer: compress = %q and zero1: ZeRO-1 reduce-scatters its buckets, which the communication hooks do not; choose one", c.Compress)
	}
	if c.CompressModel != nil {
		if err := c.CompressModel.Validate(); err != nil {
			return fmt.Errorf("trainer: compress cost model: %w", err)
		}
	}
	return nil
}

// newCompressHook is this rank's hook for cfg.Compress (nil for none);
// rank 0 reports "auto"'s decisions on standard error.
func newCompressHook[T Float](cfg Config, g *allreduce.Group) (ddp.CommHook[T], error) {
	spec, err := ddp.ParseCompress(cfg.Compress)
	if err != nil {
		return nil, fmt.Errorf("trainer: compress: %w", err)
	}
	var logf func(string, ...any)
	if g.Rank() == 0 {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	return ddp.NewCompressHook[T](spec, cfg.CompressModel, logf)
}
