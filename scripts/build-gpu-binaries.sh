#!/usr/bin/env bash
# build-gpu-binaries.sh: build, on a machine without a GPU, what
# scripts/gpu-check.sh runs on the GPU machine (which has no Go), into the
# git-ignored folder .gpu/ that the device call carries:
#
#   .gpu/cuda.test   go test -c -tags ringddp_cuda ./allreduce/cuda/   (the GPU tests)
#   .gpu/bench       go build -tags ringddp_cuda ./cmd/bench            (-transport cuda)
#
# Both without cgo (libcuda.so.1 is opened at run time, so no CUDA headers
# or toolkit are needed here) and stripped; the total must stay well under
# the 64 MiB a device call carries.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu
mkdir -p "$out"
export CGO_ENABLED=0
go test -c -tags ringddp_cuda -ldflags='-s -w' -o "$out/cuda.test" ./allreduce/cuda/
go build -tags ringddp_cuda -ldflags='-s -w' -o "$out/bench" ./cmd/bench
total=$(du -cb "$out"/* | tail -1 | cut -f1)
ls -l "$out"
echo "total $((total / 1024 / 1024)) MiB"
if ((total > 48 * 1024 * 1024)); then
	echo "build-gpu-binaries.sh: $out is over 48 MiB: too much to carry with the working tree" >&2
	exit 1
fi
