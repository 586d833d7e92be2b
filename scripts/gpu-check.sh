#!/usr/bin/env bash
# gpu-check.sh: everything the GPU machine runs for allreduce/cuda, in one
# device call of at most 6 minutes, writing under $OUT a report
# (report.md, rewritten after every stage, so that a hang or a crash
# still returns everything before it) with the logs beside it. The GPU
# machine has no Go: build the binaries here first
# (scripts/build-gpu-binaries.sh, into the git-ignored .gpu/) and carry
# them. The device call (docs/cuda.md, "Run on a GPU"):
#
#   run  command:   bash scripts/gpu-check.sh
#        carry:     [".gpu"]
#        timeout_s: 420
#
# Stages, each under its own deadline (timeout; the tests also under
# -test.timeout), at most 350 s in all, and a report of at most 20 s after
# each:
#   0. versions (15 s): GPU, driver, CUDA, glibc;
#   1. smoke (45 s): the kernels against the host, back-to-back
#      collectives, a mismatch, the tensor forms;
#   2. the matrix (115 s): every test, RINGDDP_CUDA_BIG=1 (up to 256 MiB
#      on 4 ranks), bitwise against the host;
#   3. the benchmark (115 s): 4 ranks, AllReduce float32 16 B..256 MiB
#      against one device-to-device copy of the minimum bytes, 256 MiB
#      with unaligned chunks, 8 bytes against a bare launch, ReduceScatter
#      and AllGather;
#   4. PyTorch on the same GPU (60 s): a 4-buffer reduction, the same copy.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
log() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a "$OUT/stages.txt"; }
report() { timeout 20 python3 scripts/gpu-report.py "$OUT" >"$OUT/report.md" 2>"$OUT/report.err"; }
chmod +x .gpu/cuda.test .gpu/bench 2>/dev/null

log "0. versions"
{
	timeout 10 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv 2>&1
	timeout 5 nvidia-smi 2>&1 | grep -o 'CUDA Version: [0-9.]*'
	echo "glibc: $(ldd --version 2>&1 | head -1)"
} >"$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
report

log "1. smoke"
timeout 45 .gpu/cuda.test -test.v -test.timeout 40s -test.run 'TestKernelsMatchHost|TestBackToBack|TestMismatch|TestTensor$' >"$OUT/smoke.log" 2>&1
echo "exit $?" >>"$OUT/smoke.log"
grep -E '^(--- |PASS|FAIL|ok|exit|panic)|cuda tests on' "$OUT/smoke.log" | head -20
report

log "2. matrix"
RINGDDP_CUDA_BIG=1 timeout 115 .gpu/cuda.test -test.v -test.timeout 110s >"$OUT/tests.log" 2>&1
echo "exit $?" >>"$OUT/tests.log"
grep -E '^(--- |PASS|FAIL|ok|exit|panic)' "$OUT/tests.log" | head -40
report

log "3. benchmark"
bench() { # deadline, file, bench flags...
	local d=$1 f=$2
	shift 2
	timeout "$d" .gpu/bench -transport cuda -ranks 4 -dtype float32 "$@" >>"$OUT/$f" 2>&1
	echo "# exit $?" >>"$OUT/$f"
}
bench 45 bench.txt -op allreduce -redop sum -min 16 -max 256M -factor 4 -iters 20 -warmup 5
report
bench 15 bench.txt -op allreduce -redop sum -min 268435460 -max 268435460 -iters 10 -warmup 3 -check=false # 256 MiB + 4 B: chunks not 16-byte aligned
bench 15 latency.txt -op allreduce -redop sum -min 8 -max 8 -iters 500 -warmup 50
bench 20 bench.txt -op reducescatter -redop sum -min 4M -max 256M -factor 64 -iters 10 -warmup 3
bench 20 bench.txt -op allgather -min 4M -max 256M -factor 64 -iters 10 -warmup 3
cat "$OUT/bench.txt" "$OUT/latency.txt"
report

log "4. PyTorch"
timeout 60 python3 - >"$OUT/torch.json" 2>"$OUT/torch.err" <<'PY'
import json, torch
dev = torch.device("cuda")
n, count = 4, (256 << 20) // 4
bufs = [torch.randint(-1000, 1000, (count,), device=dev).float() for _ in range(n)]
out = torch.empty(count, device=dev)
def timed(fn, iters=20, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)  # us
    ts.sort()
    return ts[len(ts) // 2]
def add_chain():
    torch.add(bufs[0], bufs[1], out=out)
    for b in bufs[2:]:
        out.add_(b)
big = torch.empty(2 * n * count, device=dev)
res = {
    "torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(),
    "bytes": count * 4, "ranks": n,
    "stack_sum_us": timed(lambda: torch.stack(bufs).sum(0)),
    "add_chain_us": timed(add_chain),
    "copy_nM_us": timed(lambda: big[n * count:].copy_(big[:n * count])),
}
small = [torch.ones(2, device=dev) for _ in range(n)]
res["stack_sum_8B_us"] = timed(lambda: torch.stack(small).sum(0), iters=200, warmup=20)
print(json.dumps(res))
PY
echo "exit $?" >>"$OUT/torch.err"
cat "$OUT/torch.json" "$OUT/torch.err"
report
log "done"
cat "$OUT/report.md"
