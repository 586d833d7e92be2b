#!/usr/bin/env bash
# gpu-check.sh: everything the GPU machine runs for allreduce/cuda, in one
# call, writing a short report under $OUT (report.md, with the logs beside
# it). The GPU machine has no Go: build the binaries here first
# (scripts/build-gpu-binaries.sh, into the git-ignored .gpu/) and carry
# them. The device call (docs/cuda.md, "Checking on a GPU"):
#
#   run  command:  bash scripts/gpu-check.sh
#        carry:    [".gpu"]
#        timeout:  540
#
# Stages (each under its own time limit, so that one hang still leaves a
# report):
#   1. the cuda tests (.gpu/cuda.test -test.v, RINGDDP_CUDA_BIG=1: up to
#      256 MiB) — the correctness matrix, bitwise against the host;
#   2. the benchmark: 4 ranks on the GPU, AllReduce float32 from 16 B to
#      256 MiB (the copy column: one device-to-device copy of the minimum
#      bytes), and 8 bytes with 500 iterations against a bare kernel launch;
#   3. PyTorch on the same GPU: torch.stack of four 256 MiB float32
#      buffers .sum(0), and a chain of torch.add, timed with CUDA events;
#   4. the report: card, test summary, the goals' ratios.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
log() { echo "== $* ($(date -u +%H:%M:%S))"; }

log "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv 2>&1 | tee "$OUT/gpu.txt"

log "1. cuda tests"
chmod +x .gpu/cuda.test .gpu/bench 2>/dev/null
RINGDDP_CUDA_BIG=1 timeout 300 .gpu/cuda.test -test.v -test.timeout 290s >"$OUT/tests.log" 2>&1
echo "exit $?" >>"$OUT/tests.log"
grep -E '^(--- |PASS|FAIL|ok|exit|panic)|cuda tests on' "$OUT/tests.log" | head -40

log "2. benchmark"
timeout 120 .gpu/bench -transport cuda -ranks 4 -op allreduce -dtype float32 -redop sum \
	-min 16 -max 256M -factor 4 -iters 20 -warmup 5 >"$OUT/bench.txt" 2>&1
echo "# exit $?" >>"$OUT/bench.txt"
timeout 60 .gpu/bench -transport cuda -ranks 4 -op allreduce -dtype float32 -redop sum \
	-min 8 -max 8 -iters 500 -warmup 50 >"$OUT/latency.txt" 2>&1
echo "# exit $?" >>"$OUT/latency.txt"
timeout 60 .gpu/bench -transport cuda -ranks 4 -op reducescatter -dtype float32 -redop sum \
	-min 1M -max 256M -factor 16 -iters 10 -warmup 3 >>"$OUT/bench.txt" 2>&1
timeout 60 .gpu/bench -transport cuda -ranks 4 -op allgather -dtype float32 \
	-min 1M -max 256M -factor 16 -iters 10 -warmup 3 >>"$OUT/bench.txt" 2>&1
cat "$OUT/bench.txt" "$OUT/latency.txt"

log "3. PyTorch"
timeout 120 python3 - >"$OUT/torch.json" 2>"$OUT/torch.err" <<'PY'
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

log "4. report"
python3 - "$OUT" <<'PY' | tee "$OUT/report.md"
import json, re, sys, os
out = sys.argv[1]
def read(name):
    try:
        return open(os.path.join(out, name)).read()
    except OSError:
        return ""
gpu = read("gpu.txt").strip().splitlines()
tests = read("tests.log")
print("# allreduce/cuda on the GPU\n")
print("card:", gpu[1] if len(gpu) > 1 else "?")
m = re.search(r"cuda tests on (.*)", tests)
print("tests:", m.group(1) if m else "?")
fails = re.findall(r"^--- FAIL: (\S+)", tests, re.M)
passes = re.findall(r"^--- PASS: (\S+)", tests, re.M)
ok = re.search(r"^PASS$", tests, re.M) and not fails
print(f"\n## Tests: {'PASS' if ok else 'FAIL'} ({len(passes)} passed, {len(fails)} failed: {' '.join(fails) or '-'}; {tests.strip().splitlines()[-1] if tests else 'no log'})")
def rows(text, op=None):
    cur, res = None, []
    for line in text.splitlines():
        h = re.match(r"# ringddp bench: op (\S+),", line)
        if h:
            cur = h.group(1).rstrip(",")
            continue
        if line.startswith("#") or not line.strip():
            continue
        f = line.split()
        if len(f) >= 12 and (op is None or cur == op):
            res.append(dict(op=cur, bytes=int(f[0]), time=float(f[6]), busbw=float(f[8]), wrong=f[9], copy=float(f[10]), ratio=float(f[11])))
    return res
bench, lat = read("bench.txt"), read("latency.txt")
ar = rows(bench, "allreduce")
print("\n## Benchmark (4 ranks on one GPU, float32 sum)\n")
print("| op | bytes | time (us) | busbw (GB/s) | wrong | copy of min bytes (us) | time/copy |")
print("|---|---|---|---|---|---|---|")
for r in rows(bench):
    print(f"| {r['op']} | {r['bytes']} | {r['time']:.1f} | {r['busbw']:.1f} | {r['wrong']} | {r['copy']:.1f} | {r['ratio']:.2f} |")
try:
    t = json.loads(read("torch.json"))
except Exception:
    t = {}
big = [r for r in ar if r["bytes"] == 256 << 20]
print("\n## Goals\n")
if big:
    b = big[0]
    print(f"- 256 MiB AllReduce: {b['time']:.1f} us = {b['ratio']:.2f}x one device-to-device copy of 4x256 MiB ({b['copy']:.1f} us); goal <= 2x: {'MET' if b['ratio'] <= 2 else 'NOT MET'}")
    if t:
        s = t["stack_sum_us"]
        print(f"- PyTorch {t.get('torch')} torch.stack(4 bufs).sum(0): {s:.1f} us; add chain {t['add_chain_us']:.1f} us; torch copy of 4x256 MiB {t['copy_nM_us']:.1f} us")
        print(f"- ours / stack-sum = {b['time']/s:.2f} (goal <= 1.5: {'MET' if b['time'] <= 1.5*s else 'NOT MET'}); ours / add chain = {b['time']/t['add_chain_us']:.2f}")
else:
    print("- no 256 MiB row (see bench.txt)")
lr = rows(lat)
m = re.search(r"bare kernel launch.*: ([0-9.]+) us", lat)
if lr and m:
    print(f"- 8-byte AllReduce on 4 ranks: {lr[0]['time']:.1f} us; bare kernel launch + wait: {float(m.group(1)):.1f} us ({lr[0]['time']/float(m.group(1)):.1f}x)" +
          (f"; PyTorch stack-sum of 4x8 B: {t['stack_sum_8B_us']:.1f} us (GPU time)" if t else ""))
print("\nAll times on the card above, in this one run; host-timed for ours (barrier to stream completion), CUDA events for PyTorch and the copy.")
PY
log "done"
