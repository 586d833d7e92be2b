//go:build ringddp_cuda

package cuda

import (
	"context"
	"io"
)

// Bench is BenchOn on GPU cfg.Device: cmd/bench -transport cuda.
func Bench(ctx context.Context, cfg BenchConfig, out io.Writer) error {
	dev, err := Open(cfg.Device)
	if err != nil {
		return err
	}
	defer dev.Close()
	return BenchOn(ctx, dev, cfg, out)
}
