#!/usr/bin/env python3
"""gpu-report.py OUT: the report (markdown, on stdout) of what
scripts/gpu-check.sh has written under OUT so far: versions, smoke and
matrix test summaries, the benchmark table, and the issue's goals (the
256 MiB AllReduce on 4 ranks within 2x one device-to-device copy of the
bytes a rank must move, and within 1.5x PyTorch's own reduction). Stages
not run yet are reported as such."""
import json, os, re, sys

out = sys.argv[1]


def read(name):
    try:
        return open(os.path.join(out, name)).read()
    except OSError:
        return ""


def tests(name, title):
    log = read(name)
    if not log:
        print(f"\n## {title}: not run")
        return
    fails = re.findall(r"^\s*--- FAIL: (\S+)", log, re.M)
    passes = re.findall(r"^\s*--- PASS: (\S+)", log, re.M)
    skips = re.findall(r"^\s*--- SKIP: (\S+)", log, re.M)
    ok = re.search(r"^PASS$", log, re.M) and not fails
    last = log.strip().splitlines()[-1]
    print(f"\n## {title}: {'PASS' if ok else 'FAIL'} ({len(passes)} passed, {len(fails)} failed: {' '.join(fails) or '-'}, {len(skips)} skipped; {last})")
    print()
    for line in re.findall(r"^(?:cuda tests.*|panic:.*|\s+\S+_test\.go:\d+: .*)$", log, re.M)[:12]:
        print(f"    {line.strip()}")


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
            try:
                res.append(dict(op=cur, bytes=int(f[0]), time=float(f[6]), busbw=float(f[8]), wrong=f[9],
                                copy=float(f[10]), ratio=float(f[11]), aligned=f[12] if len(f) > 12 else "?"))
            except ValueError:
                pass
    return res


print("# allreduce/cuda on the GPU\n")
print("```\n" + (read("versions.txt").strip() or "versions: not run") + "\n```")
print("\nstages:\n```\n" + read("stages.txt").strip() + "\n```")
tests("smoke.log", "Smoke tests")
tests("tests.log", "Tests (RINGDDP_CUDA_BIG=1)")
bench, lat = read("bench.txt"), read("latency.txt")
print("\n## Benchmark (4 ranks on one GPU, float32 sum)\n")
if not bench:
    print("not run")
else:
    print("| op | bytes | time (us) | busbw (GB/s) | wrong | copy of min bytes (us) | time/copy | chunks aligned |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows(bench):
        print(f"| {r['op']} | {r['bytes']} | {r['time']:.1f} | {r['busbw']:.1f} | {r['wrong']} | {r['copy']:.1f} | {r['ratio']:.2f} | {r['aligned']} |")
    for e in re.findall(r"^(?!#).*(?:error|panic|cuda:|exit [1-9]).*$", bench, re.M)[:5]:
        print(f"\n    {e}")
try:
    t = json.loads(read("torch.json"))
except Exception:
    t = {}
print("\n## Goals\n")
ar = rows(bench, "allreduce")
big = [r for r in ar if r["bytes"] == 256 << 20]
if big:
    b = big[0]
    print(f"- 256 MiB AllReduce: {b['time']:.1f} us = {b['ratio']:.2f}x one device-to-device copy of 4x256 MiB ({b['copy']:.1f} us); goal <= 2x: {'MET' if b['ratio'] <= 2 else 'NOT MET'}")
    un = [r for r in ar if r["bytes"] == (256 << 20) + 4]
    if un:
        print(f"- 256 MiB + 4 B (chunks not 16-byte aligned: the kernels' scalar loop): {un[0]['time']:.1f} us ({un[0]['time'] / b['time']:.2f}x the aligned size)")
    if t:
        s = t["stack_sum_us"]
        print(f"- PyTorch {t.get('torch')} (CUDA {t.get('cuda')}) torch.stack(4 bufs).sum(0): {s:.1f} us; add chain {t['add_chain_us']:.1f} us; torch copy of 4x256 MiB {t['copy_nM_us']:.1f} us")
        print(f"- ours / stack-sum = {b['time'] / s:.2f} (goal <= 1.5: {'MET' if b['time'] <= 1.5 * s else 'NOT MET'}); ours / add chain = {b['time'] / t['add_chain_us']:.2f}")
    else:
        print("- PyTorch: not run or failed (torch.err: " + read("torch.err").strip()[-300:] + ")")
else:
    print("- no 256 MiB AllReduce row (see bench.txt)")
lr = rows(lat)
m = re.search(r"bare kernel launch.*: ([0-9.]+) us", lat)
if lr and m:
    print(f"- 8-byte AllReduce on 4 ranks: {lr[0]['time']:.1f} us; bare kernel launch + wait: {float(m.group(1)):.1f} us ({lr[0]['time'] / float(m.group(1)):.1f}x)" +
          (f"; PyTorch stack-sum of 4x8 B: {t['stack_sum_8B_us']:.1f} us (GPU time)" if t else ""))
print("\nAll times on the card above, in this one run; host-timed for ours (barrier to stream completion), CUDA events for PyTorch and the copy.")
