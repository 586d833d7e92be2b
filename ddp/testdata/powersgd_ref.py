#!/usr/bin/python3
"""Reference vectors for ddp's PowerSGD hook from PyTorch's own powerSGD_hook.

Run with PyTorch (1.13 made the committed file):

    /usr/bin/python3 ddp/testdata/powersgd_ref.py > ddp/testdata/powersgd_ref.json

Two gloo processes on localhost run torch.distributed.algorithms.ddp_comm_hooks
.powerSGD_hook.powerSGD_hook on two buckets for several steps. The buckets are
plain objects with the methods the hook calls (GradBucket has no Python
constructor). torch.randn is replaced by draws from a seeded numpy generator,
recorded per hook call, so that the Go test can start from the same Qs.
"""
import json
import sys

import numpy as np
import torch
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

import torchworld
from torchworld import g9

WORLD = 2
STEPS = 5
BUCKETS = [[[16, 12], [10]], [[8, 3, 4], [5, 4], [12]]]
CASES = [
    dict(rank=2, start=2, rate=2.0, ef=True, warm=True),
    dict(rank=3, start=2, rate=2.0, ef=True, warm=True),
    dict(rank=1, start=0, rate=2.0, ef=False, warm=False),
    dict(rank=4, start=2, rate=0.5, ef=True, warm=True),
]


class Bucket:
    def __init__(self, index, last, buf, shapes):
        self._index, self._last, self._buf = index, last, buf
        self._grads, off = [], 0
        for s in shapes:
            n = int(np.prod(s))
            self._grads.append(buf[off:off + n].view(*s))
            off += n

    def index(self):
        return self._index

    def is_last(self):
        return self._last

    def buffer(self):
        return self._buf

    def gradients(self):
        return self._grads


def inputs(case, step, rank, bucket):
    n = sum(int(np.prod(s)) for s in BUCKETS[bucket])
    r = np.random.RandomState(1000 * case + 100 * step + 10 * rank + bucket)
    return r.standard_normal(n).astype(np.float32)


def worker(rank):
    results = []
    for ci, c in enumerate(CASES):
        draws = np.random.RandomState(77 + ci)
        record = []

        def randn(*shape, device=None, dtype=None):
            v = draws.standard_normal(int(np.prod(shape))).astype(np.float32)
            record[-1].extend(float(x) for x in v)
            return torch.from_numpy(v).view(*shape)

        psgd.torch.randn = randn
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=c["rank"],
                                   start_powerSGD_iter=c["start"], min_compression_rate=c["rate"],
                                   use_error_feedback=c["ef"], warm_start=c["warm"])
        steps = []
        for s in range(STEPS):
            outs = []
            for b in range(len(BUCKETS)):
                record.append([])
                buf = torch.from_numpy(inputs(ci, s, rank, b).copy())
                bk = Bucket(b, b == len(BUCKETS) - 1, buf, BUCKETS[b])
                res = psgd.powerSGD_hook(state, bk).wait()
                outs.append(dict(inputs=[g9(inputs(ci, s, r, b)) for r in range(WORLD)],
                                 out=g9(res.view(-1).numpy()), q=g9(record[-1])))
            steps.append(outs)
        results.append(dict(case=c, steps=steps))
    return results


def main():
    results = torchworld.run(worker, WORLD, 29500)
    json.dump(dict(world=WORLD, buckets=BUCKETS, torch=torch.__version__, cases=results), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
