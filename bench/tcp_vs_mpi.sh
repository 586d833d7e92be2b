#!/bin/sh
# Compares ringddp's TCP transport with OpenMPI's TCP BTL on this host:
# ROUNDS rounds (default 5), each running cmd/bench -transport tcp and
# bench/mpi/run.sh tcp back to back (alternating which goes first), for one
# message size on NP ranks (default 4). Prints every round's time (µs, the
# median iteration of the slowest rank, both tools measure alike) and the
# median over rounds of each, with their ratio. For sizes of 1 MiB and up
# each round also runs bench/tcpfloor, the bytes of a ring all-reduce over
# plain loopback TCP with nothing else: the floor. The machine is shared
# and noisy; the median of alternating rounds is what to quote.
#
#   bench/tcp_vs_mpi.sh SIZE [ITERS]     e.g. bench/tcp_vs_mpi.sh 64M 10
#                                             bench/tcp_vs_mpi.sh 8 2000
#
# Needs Debian's openmpi-bin and libopenmpi-dev (see bench/mpi/run.sh).
set -eu
cd "$(dirname "$0")/.."
size=${1:?usage: bench/tcp_vs_mpi.sh SIZE [ITERS]}
iters=${2:-20}
np=${NP:-4}
rounds=${ROUNDS:-5}
warmup=$((iters / 10 + 2))
bin=${TMPDIR:-/tmp}/ringddp-bench-tcp
go build -o "$bin" ./cmd/bench
go build -o "$bin-floor" ./bench/tcpfloor
bytes=$(echo "$size" | awk '{ n = $1 + 0; u = toupper(substr($1, length($1))); if (u == "K") n *= 1024; if (u == "M") n *= 1048576; if (u == "G") n *= 1073741824; print n }')

ours() {
	"$bin" -transport tcp -op allreduce -ranks "$np" -min "$size" -max "$size" -factor 1 \
		-iters "$iters" -warmup "$warmup" | awk '/^ +[0-9]/ { print $7 }'
}
# cmd/bench settles its fresh endpoints with up to 100 more untimed
# iterations of a sweep's first size (enough to move 64 MiB, at least 1:
# cmd/bench/rank.go); OpenMPI's side gets as many, so both time alike.
settle=$(( (67108864 + bytes - 1) / bytes ))
[ "$settle" -gt 100 ] && settle=100
[ "$settle" -lt 1 ] && settle=1
mpi() {
	NP=$np bench/mpi/run.sh tcp -min "$size" -max "$size" -iters "$iters" -warmup "$((warmup + settle))" |
		awk '/^ +[0-9]/ { print $3 }'
}
floor() {
	"$bin-floor" -ranks "$np" -size "$size" -iters "$iters" | awk '{ print $5 }'
}
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "# $(date -u +%FT%TZ) size $size, $np ranks, $iters iterations, $rounds rounds; $(uptime | sed 's/.*load average/load average/')"
o=$(mktemp) m=$(mktemp) f=$(mktemp)
trap 'rm -f "$o" "$m" "$f"' EXIT
i=0
while [ $i -lt "$rounds" ]; do
	if [ $((i % 2)) -eq 0 ]; then
		a=$(ours) b=$(mpi)
	else
		b=$(mpi) a=$(ours)
	fi
	line="round $i: ringddp $a µs, openmpi $b µs"
	if [ "$bytes" -ge 1048576 ]; then
		c=$(floor)
		echo "$c" >>"$f"
		line="$line, tcp floor $c µs"
	fi
	echo "$line"
	echo "$a" >>"$o"
	echo "$b" >>"$m"
	i=$((i + 1))
done
mo=$(median <"$o") mm=$(median <"$m")
echo "median: ringddp $mo µs, openmpi $mm µs, openmpi/ringddp time ratio $(echo "$mm $mo" | awk '{ printf "%.2f", $1 / $2 }')"
if [ -s "$f" ]; then
	mf=$(median <"$f")
	echo "median tcp floor $mf µs: ringddp takes $(echo "$mo $mf" | awk '{ printf "%.2f", $1 / $2 }')x the floor, openmpi $(echo "$mm $mf" | awk '{ printf "%.2f", $1 / $2 }')x"
fi
