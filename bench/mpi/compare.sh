#!/bin/sh
# Measures ringddp's in-process all-reduce (-algo ring, the default, and
# -algo auto, which is direct on inproc) and OpenMPI's MPI_Allreduce over
# shared memory back to back on this machine: the 8 B .. 64 MiB sweep
# (factor 8, float32, sum, 4 ranks; its last row is 16 MiB, as factor 8 from
# 8 B skips 64 MiB, so 64 MiB is also measured on its own) and the 8-byte
# latency, each twice and interleaved (ring, auto, MPI, ring, auto, MPI) so
# that all see the same load; the load average is printed before every run.
# Run from anywhere:
#
#   bench/mpi/compare.sh [tcp]
#
# With tcp, OpenMPI's TCP-over-loopback sweep is run once more at the end.
set -eu
cd "$(dirname "$0")/../.."

sweep="-min 8 -max 64M -factor 8"
big="-min 64M -max 64M"
lat="-min 8 -max 8 -iters 2000 -warmup 200"

load() { echo "## $(date -u +%H:%M:%S) $(uptime | sed 's/.*load average/load average/')"; }

# round NAME OURS_ARGS MPI_ARGS: ours (ring), ours (auto), MPI, twice.
round() {
	name=$1 ours=$2 mpi=$3
	for i in 1 2; do
		for algo in ring auto; do
			load
			echo "## ours $name, -algo $algo, run $i: go run ./cmd/bench -op allreduce -ranks 4 $ours -dtype float32 -algo $algo"
			go run ./cmd/bench -op allreduce -ranks 4 $ours -dtype float32 -algo $algo
		done
		load
		echo "## MPI shm $name, run $i: bench/mpi/run.sh shm $mpi"
		bench/mpi/run.sh shm $mpi
	done
}

go build -o /dev/null ./cmd/bench # compile once, outside the measurements
round sweep "$sweep" "$sweep"
round "64 MiB" "$big -factor 1" "$big"
round "8 B latency" "$lat -factor 1" "$lat"
if [ "${1:-}" = tcp ]; then
	load
	echo "## MPI tcp (loopback): bench/mpi/run.sh tcp $sweep"
	bench/mpi/run.sh tcp $sweep
fi
load
