#!/usr/bin/env bash
# Runs every fuzz target of the module for a bounded time each (FUZZTIME,
# default 2s): the decoders of everything that reads the network, shared
# memory or a file (store frames, handshakes, stall and abort frames, shm
# slots, safetensors headers, IDX files) and the GEMM. Targets are found by
# their declarations (`func FuzzXxx(f *testing.F)` in a _test.go file), so
# a new target runs here without an edit. A failing input is written by the
# go command under the package's testdata/fuzz/ and fails this script.
# `go test ./...` already runs every target's seed corpus; this adds
# generated inputs. Usage: scripts/fuzz-ci.sh [FUZZTIME]
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-${FUZZTIME:-2s}}
n=0
while IFS=: read -r file name; do
	dir=./$(dirname "$file")
	echo "-- $dir $name ($fuzztime)"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir" >/tmp/fuzz-ci.$$.log 2>&1 || {
		cat /tmp/fuzz-ci.$$.log
		rm -f /tmp/fuzz-ci.$$.log
		echo "fuzz target $name in $dir failed (the failing input is under $dir/testdata/fuzz/$name/)"
		exit 1
	}
	n=$((n + 1))
done < <(grep -rEo --include='*_test.go' '^func (Fuzz[A-Za-z0-9_]*)\(f \*testing\.F\)' . |
	sed -E 's/^\.\/([^:]*):func (Fuzz[A-Za-z0-9_]*).*/\1:\2/' | sort)
rm -f /tmp/fuzz-ci.$$.log
echo "$n fuzz targets ran $fuzztime each, no failure"
