package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/ringddp/ringddp/datasets"
)

// noBundledMNISTHint follows the error of a run that could not find the
// bundled MNIST (the error names the files and where to download them):
// on a host without the go command, a deployed binary, it is in no module
// cache and cannot be downloaded.
const noBundledMNISTHint = "  train with -data DIR, DIR holding those four files: `train -export-data DIR` (or\n" +
	"  `go run ./cmd/train -export-data DIR`) writes them on a machine with Go; then copy DIR to this host"

// exportData is -export-data dir: it writes the bundled MNIST's files into
// dir, for -data on hosts without the go command.
func exportData(ctx context.Context, dir string, stdout io.Writer) error {
	paths, err := datasets.ExportBundledMNIST(ctx, dir)
	if err != nil {
		return fmt.Errorf("-export-data: %w", err)
	}
	for _, p := range paths {
		fmt.Fprintln(stdout, "wrote", p)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	fmt.Fprintf(stdout, "the real MNIST (module %s@%s); copy the directory to each host and train with -data %s\n",
		datasets.GoMNISTModule, datasets.GoMNISTVersion, abs)
	return nil
}
