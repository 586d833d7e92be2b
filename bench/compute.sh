#!/bin/sh
# Measures issue #29's compute goals on this machine, every figure beside its
# baseline from the same minutes, in alternating rounds (ROUNDS, default 3):
#   - one pinned core (taskset -c 0 for both): the default build, the openblas
#     build and PyTorch 1.13 (Debian python3-torch, OpenBLAS, 1 thread), MLP
#     and LeNet, global batch 256, 1 epoch;
#   - 4 ranks: the default build against PyTorch DDP (gloo, 1 thread per process);
#   - sgemm/dgemm GFLOP/s of every kernel variant against OpenBLAS on one thread.
# Needs: libopenblas-dev python3-torch (Debian). Prints the CPU first: the
# figures depend on it. Run from anywhere: bench/compute.sh
set -eu
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
load() { echo "## $(date -u +%H:%M:%S) $(uptime | sed 's/.*load average/load average/')"; }
grep -m1 'model name' /proc/cpuinfo
grep -o -w -m1 -E 'avx512f' /proc/cpuinfo || echo "no avx512f"
go build -o /tmp/ringddp-train ./cmd/train
go build -tags openblas -o /tmp/ringddp-train-openblas ./cmd/train
mnist=$(mktemp -d)
/tmp/ringddp-train -export-data "$mnist" >/dev/null
torch() { /usr/bin/python3 bench/pytorch/ddp_mnist.py --data "$mnist" --batch 256 --epochs 1 "$@" 2>/dev/null; }

echo "### one pinned core: MLP and LeNet, global batch 256, 1 epoch ($rounds alternating rounds)"
for i in $(seq "$rounds"); do
	for model in mlp cnn; do
		load
		echo "## default build, -model $model"
		taskset -c 0 /tmp/ringddp-train -ranks 1 -epochs 1 -model $model -quiet -out "" | grep '^epoch'
		echo "## openblas build, -model $model"
		taskset -c 0 /tmp/ringddp-train-openblas -ranks 1 -epochs 1 -model $model -quiet -out "" | grep '^epoch'
		echo "## pytorch, --model $model"
		taskset -c 0 /usr/bin/python3 bench/pytorch/ddp_mnist.py --data "$mnist" --batch 256 --epochs 1 --ranks 1 --model $model 2>/dev/null
	done
done

echo "### 4 ranks, MLP, global batch 256, 1 epoch ($rounds alternating rounds)"
for i in $(seq "$rounds"); do
	load
	echo "## default build"
	/tmp/ringddp-train -ranks 4 -epochs 1 -quiet -out "" | grep '^epoch'
	echo "## pytorch DDP"
	torch --ranks 4
done

echo "### GEMM, one thread: every variant against OpenBLAS ($rounds rounds)"
load
go test -tags openblas -run - -bench Gemm -benchtime 200ms -count "$rounds" ./internal/blas | grep -E '^Benchmark'
rm -rf "$mnist"
