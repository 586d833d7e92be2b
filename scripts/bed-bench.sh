#!/bin/sh
# scripts/bed-bench.sh [BASE]: the test bed's all-reduce measurement
# (docs/testbed.md, "Topology algorithms on the bed"): on emulated hosts
# linked at 1 Gbit/s, every algorithm's median time, busbw and fraction of
# the floor, and the bytes the busiest host sends per all-reduce, per
# layout and size (internal/testbed/hoststest's TestBedBench). Given a
# commit BASE, its cmd/bench and this tree's run side by side, round by
# round. Needs root, ip and tc (the bed's own requirements).
#
# The environment changes what runs: RINGDDP_BED_BENCH (layouts, default
# 2x2,3x2), RINGDDP_BED_BENCH_SIZES (16M,64M), RINGDDP_BED_BENCH_ALGOS
# (ring,hd,hierarchical,torus,mesh), RINGDDP_BED_BENCH_ITERS (5),
# RINGDDP_BED_BENCH_ROUNDS (3).
set -eu
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
go build -o "$tmp/bench-head" ./cmd/bench
bins="this tree=$tmp/bench-head"
if [ $# -ge 1 ]; then
	mkdir "$tmp/base"
	git archive "$1" | tar -x -C "$tmp/base"
	(cd "$tmp/base" && go build -o "$tmp/bench-base" ./cmd/bench)
	bins="$1=$tmp/bench-base,$bins"
fi
RINGDDP_BED_BENCH="${RINGDDP_BED_BENCH:-2x2,3x2}" RINGDDP_BED_BENCH_BIN="$bins" \
	go test -count=1 -run TestBedBench -v -timeout 120m ./internal/testbed/hoststest/
