#!/bin/sh
# scripts/bed-calib.sh: the cost model's check on the test bed
# (docs/testbed.md, "The cost model on the bed"): per layout, on emulated
# hosts linked at 1 Gbit/s, cmd/bench -calibrate across the hosts, then
# auto and every algorithm it picks from at 64 KiB ... 64 MiB under the
# profile written: measured against predicted per algorithm and size
# (within 25%?), and Auto against the fastest measured per size (within
# 5%?) (internal/testbed/hoststest's TestBedCalib). The test builds
# cmd/bench, makes each bed and tears it down. Needs root, ip and tc (the
# bed's own requirements).
#
# The environment changes what runs: RINGDDP_BED_CALIB (layouts, default
# 2x2,3x2), RINGDDP_BED_CALIB_ALGOS (auto,ring,doubling,tree,hd,
# hierarchical,torus), RINGDDP_BED_CALIB_ITERS (3), RINGDDP_BED_CALIB_ROUNDS (2: the
# 4-64 MiB sweep's rounds, each cell the fastest), RINGDDP_BED_CALIB_SMALL_ROUNDS (5: the
# 64 KiB-1 MiB sweep's, back to back, each cell the median).
# RINGDDP_BED_CALIB_BURST (5ms: the links' token bucket as a time; a real link saves up nothing).
set -eu
cd "$(dirname "$0")/.."
trap 'exit 1' INT TERM
RINGDDP_BED_CALIB="${RINGDDP_BED_CALIB:-2x2,3x2}" \
	go test -count=1 -run TestBedCalib -v -timeout 30m ./internal/testbed/hoststest/
