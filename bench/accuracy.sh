#!/bin/sh
# The cost model's prediction accuracy on this host (docs/scaling.md,
# "Predictions against measurements"): ROUNDS rounds (default 5), each
# running cmd/bench -json over tcp and in process, alternating, the
# algorithms' order rotated every round (what ran before moves an
# algorithm's time), ring, tree and hd on NP ranks (default 4) from 4 KiB
# to 64 MiB; then cmd/bench -compare prints, per algorithm and size, the
# median of the rounds' times against each transport's profile's
# prediction and how many sizes are within 25%. The machine is shared and
# noisy: run it with nothing else running, right after calibrating if the
# profile is fresh (a host's speed moves by 15% over an hour here).
#
#   bench/accuracy.sh [DIR]      the runs' rows go to DIR (default a new
#                                temporary directory), one file per round
#
# Profiles: allreduce/testdata/profiles/{tcp,inproc}-$NP.json, or
# TCP_PROFILE and INPROC_PROFILE; with CALIBRATE=1, calibrations of both
# transports made first, into DIR/cal-tcp.json and DIR/cal-inproc.json
# (their reports beside them, .log): the issue's protocol, the profile
# calibrated on the host as it is when the runs are. About 20 s a round
# on the 2-core VM; the calibrations about 5.5 and 1.5 minutes.
set -eu
cd "$(dirname "$0")/.."
dir=${1:-$(mktemp -d)}
mkdir -p "$dir"
np=${NP:-4}
rounds=${ROUNDS:-5}
tcp_profile=${TCP_PROFILE:-allreduce/testdata/profiles/tcp-$np.json}
inproc_profile=${INPROC_PROFILE:-allreduce/testdata/profiles/inproc-$np.json}
bin=${TMPDIR:-/tmp}/ringddp-bench-accuracy
go build -o "$bin" ./cmd/bench
if [ "${CALIBRATE:-0}" = 1 ]; then
	for t in tcp inproc; do
		"$bin" -calibrate "$dir/cal-$t.json" -transport "$t" -ranks "$np" -min 4K -max 64M -factor 2 >"$dir/cal-$t.log"
		echo "# calibrated $t ($(date +%T)): $(grep -E "^# Auto's picks" "$dir/cal-$t.log" | sed 's/^# //')"
	done
	tcp_profile=$dir/cal-tcp.json inproc_profile=$dir/cal-inproc.json
fi
i=0
while [ "$i" -lt "$rounds" ]; do
	order=$(echo "ring,tree,hd tree,hd,ring hd,ring,tree" | cut -d' ' -f$((i % 3 + 1)))
	for t in tcp inproc; do
		"$bin" -transport "$t" -ranks "$np" -algo "$order" -min 4K -max 64M -json >"$dir/$t-$i.json"
	done
	echo "# round $i done ($(date +%T), -algo $order, load $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo ?))"
	i=$((i + 1))
done
"$bin" -compare "$dir/tcp-[0-9]*.json" -transport tcp -ranks "$np" -profile "$tcp_profile"
echo
"$bin" -compare "$dir/inproc-[0-9]*.json" -transport inproc -ranks "$np" -profile "$inproc_profile"
