//go:build !ringddp_cuda

package cuda

import (
	"fmt"
	"os"
	"time"
)

// Without the ringddp_cuda tag the device tests run on the host device,
// its streams pausing before operations (WithStreamDelay), so that work
// the events do not order runs in varied orders.
func openTestDevice() (*Device, func(), error) {
	d, err := NewHostSystem(WithStreamDelay(200*time.Microsecond), WithSeed(uint64(os.Getpid()))).Open(0)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(os.Stderr, "cuda tests on the host device (no GPU: build with -tags ringddp_cuda for one)\n")
	return d, func() { _ = d.Close() }, nil
}

const onGPU = false
