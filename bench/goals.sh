#!/bin/sh
# Measures the performance goals of the collectives, DDP and ZeRO-1 issues
# back to back on this machine, so every figure has its baseline from the
# same minutes. Prints the load before each measurement. Needs, for the
# baselines: openmpi-bin libopenmpi-dev libopenblas-dev python3-torch
# (Debian). Run from anywhere: bench/goals.sh
set -eu
cd "$(dirname "$0")/.."
load() { echo "## $(date -u +%H:%M:%S) $(uptime | sed 's/.*load average/load average/')"; }
go build -o /tmp/ringddp-bench ./cmd/bench
go build -o /tmp/ringddp-train ./cmd/train
mnist=$(mktemp -d)
/tmp/ringddp-train -export-data "$mnist" # the bundled MNIST, for the PyTorch baseline
go build -tags openblas -o /tmp/ringddp-train-openblas ./cmd/train

echo "### collectives: in-process AllReduce vs memcpy of 4x64 MiB (go test -bench)"
load
go test -run XXX -bench 'AllReduceInproc/ranks=4/bytes=(8B|64MiB)|MemcpyBaseline' -benchmem -benchtime 3s ./allreduce/ | grep -E '^Benchmark'
echo "### collectives: ours vs OpenMPI shared memory, 64 MiB and 8 B, 4 ranks"
for i in 1 2; do
	load
	/tmp/ringddp-bench -op allreduce -ranks 4 -min 64M -max 64M -factor 1 -json
	bench/mpi/run.sh shm -min 64M -max 64M | tail -3
	/tmp/ringddp-bench -op allreduce -ranks 4 -min 8 -max 8 -iters 2000 -warmup 200 -json
	bench/mpi/run.sh shm -min 8 -max 8 -iters 2000 -warmup 200 | tail -3
done

echo "### TCP (4 processes on loopback) vs OpenMPI's TCP BTL: 8 B and 64 MiB, alternating rounds"
ROUNDS=5 bench/tcp_vs_mpi.sh 8 2000
ROUNDS=5 bench/tcp_vs_mpi.sh 64M 10
NP=2 ROUNDS=3 bench/tcp_vs_mpi.sh 8 2000
NP=2 ROUNDS=3 bench/tcp_vs_mpi.sh 64M 10

echo "### DDP: samples/s and comm wait, global batch 256, 1 epoch"
for blas in "" -openblas; do
	for r in 1 2 4; do
		load
		echo "## ringddp-train$blas -ranks $r -epochs 1"
		/tmp/ringddp-train$blas -ranks $r -epochs 1 -quiet -out "" | grep -A1 '^epoch' # the headline and the breakdown
	done
done
echo "### PyTorch DDP (gloo, 1 thread per process), 4 ranks, global batch 256, 1 epoch"
load
/usr/bin/python3 bench/pytorch/ddp_mnist.py --data "$mnist" --ranks 4 --batch 256 --epochs 1 2>/dev/null
load
/tmp/ringddp-train-openblas -ranks 4 -epochs 1 -quiet -out "" | grep '^epoch'

echo "### ZeRO-1 vs DDP: Adam, 4 ranks, 3 epochs (step time, accuracy, optimizer state)"
for mode in "" -zero1; do
	load
	echo "## ringddp-train -optim adam -ranks 4 $mode"
	/tmp/ringddp-train -optim adam -ranks 4 -json $mode
done
for r in 2; do
	for mode in "" -zero1; do
		echo "## ringddp-train -optim adam -ranks $r -epochs 1 $mode"
		/tmp/ringddp-train -optim adam -ranks $r -epochs 1 -json -out "" $mode
	done
done
