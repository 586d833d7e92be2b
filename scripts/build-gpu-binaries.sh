#!/usr/bin/env bash
# build-gpu-binaries.sh: build, on a machine without a GPU, what
# scripts/gpu-check.sh runs on the GPU machine (which has no Go), into the
# git-ignored folder .gpu/ that the device call carries:
#
#   .gpu/cuda.test   go test -c -tags cuda ./allreduce/cuda/   (the GPU tests)
#   .gpu/bench       go build -tags cuda ./cmd/bench            (-transport cuda)
#
# Both stripped (-ldflags='-s -w'); the total must stay well under the
# 64 MiB a device call carries. Needs the headers (scripts/cuda-env.sh
# installs them); the binaries link libcuda.so.1, which the GPU machine's
# driver provides.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/cuda-env.sh -check)"
out=.gpu
mkdir -p "$out"
quiet() { # cgo warnings of gorgonia.org/cu (deprecated declarations) are noise
	"$@" 2> >(grep -v -e 'warning:' -e 'note:' -e 'cgo-gcc-prolog' -e '^ *[0-9]* |' -e '^ *|' -e 'In file included' -e '^# gorgonia.org/cu$' >&2)
}
quiet go test -c -tags cuda -ldflags='-s -w' -o "$out/cuda.test" ./allreduce/cuda/
quiet go build -tags cuda -ldflags='-s -w' -o "$out/bench" ./cmd/bench
total=$(du -cb "$out"/* | tail -1 | cut -f1)
ls -l "$out"
echo "total $((total / 1024 / 1024)) MiB"
if ((total > 48 * 1024 * 1024)); then
	echo "build-gpu-binaries.sh: $out is over 48 MiB: too much to carry with the working tree" >&2
	exit 1
fi
