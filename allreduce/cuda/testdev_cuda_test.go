//go:build ringddp_cuda

package cuda

import (
	"fmt"
	"os"
)

// With the ringddp_cuda tag the device tests run on GPU 0; a machine
// without one fails them at once, saying why.
func openTestDevice() (*Device, func(), error) {
	v, err := DriverVersion()
	if err != nil {
		return nil, nil, err
	}
	d, err := Open(0)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(os.Stderr, "cuda tests on %s (%d SMs), driver's CUDA %d.%d\n", d.Name(), d.Multiprocessors(), v/1000, v%1000/10)
	return d, func() { _ = d.Close() }, nil
}

const onGPU = true
