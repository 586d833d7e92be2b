#!/bin/sh
# Builds allreduce_bench.c with mpicc and runs it on NP ranks (default 4) of
# this host with OpenMPI.
#
#   bench/mpi/run.sh [shm|tcp] [allreduce_bench flags...]
#
#   shm  (default) OpenMPI's default BTL selection: shared memory (vader)
#        between ranks of one host.
#   tcp  the TCP BTL over loopback only: --mca btl tcp,self
#        --mca btl_tcp_if_include lo
#
# Flags go to the benchmark: -min 8 -max 64M -factor 8 -iters 20 -warmup 5.
# Needs Debian's openmpi-bin and libopenmpi-dev. Environment: NP (ranks),
# BUILD_DIR (where the binary goes, default a temporary directory).
set -eu

mode=shm
case "${1:-}" in
shm | tcp)
	mode=$1
	shift
	;;
esac

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-${TMPDIR:-/tmp}/ringddp-mpi-bench}
mkdir -p "$build"
mpicc -O2 -Wall -o "$build/allreduce_bench" "$here/allreduce_bench.c"

case $mode in
shm) mca= ;;
tcp) mca="--mca btl tcp,self --mca btl_tcp_if_include lo" ;;
esac

echo "# mode $mode: mpirun --allow-run-as-root --oversubscribe -n ${NP:-4} $mca $build/allreduce_bench $*"
# shellcheck disable=SC2086 # $mca is a list of words
exec mpirun --allow-run-as-root --oversubscribe -n "${NP:-4}" $mca "$build/allreduce_bench" "$@"
