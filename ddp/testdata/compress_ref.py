#!/usr/bin/python3
"""Reference vectors for ddp's 16-bit compression hooks from PyTorch's own
fp16_compress_hook and, as gloo cannot all-reduce bfloat16, bf16_compress_hook's
own steps with the sum as NCCL forms it (accumulated in float32, rounded once):
no error feedback (PyTorch's hooks have none).

    /usr/bin/python3 ddp/testdata/compress_ref.py > ddp/testdata/compress_ref.json

Two gloo processes on localhost run the hooks on buckets of values spread over
many magnitudes (normal in both formats, ties included), as in powersgd_ref.py.
"""
import json
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as hooks

import torchworld
from torchworld import g9

WORLD = 2
N = 257


class Bucket:
    def __init__(self, buf):
        self._buf = buf

    def buffer(self):
        return self._buf


def inputs(rank):
    r = np.random.RandomState(5 + rank)
    v = r.standard_normal(N) * np.exp2(r.randint(-12, 12, N))
    v[:8] = [1.0, -2.5, 1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, 3 * 2**-9, 60000.0, -1e-3]
    return v.astype(np.float32)


def worker(rank):
    res = {}
    buf = torch.from_numpy(inputs(rank).copy())
    res["fp16"] = g9(hooks.fp16_compress_hook(None, Bucket(buf)).wait().numpy())
    # bf16_compress_hook: buffer().to(torch.bfloat16).div_(world_size), all-reduce, copy back.
    c = torch.from_numpy(inputs(rank).copy()).to(torch.bfloat16).div_(WORLD)
    parts = [torch.empty(N) for _ in range(WORLD)]
    dist.all_gather(parts, c.float())
    total = torch.zeros(N)
    for p in parts:
        total += p
    res["bf16"] = g9(total.to(torch.bfloat16).float().numpy())
    return res


def main():
    res = torchworld.run(worker, WORLD, 30500, timeout=60)
    json.dump(dict(world=WORLD, torch=torch.__version__, inputs=[g9(inputs(r)) for r in range(WORLD)], out=res), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
