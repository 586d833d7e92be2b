"""What the reference scripts share: a world of gloo processes on localhost
that each run a function, rank 0's result handed back, and float32 values
written as the shortest decimals that read back the same."""
import os

import numpy as np
import torch.distributed as dist
import torch.multiprocessing as mp


def g9(values):
    """float32 values as the shortest decimals that read back the same."""
    return [float(repr(np.float32(x))) for x in values]


def _rank(fn, rank, world, port, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    res = fn(rank)
    if rank == 0:
        out.put(res)
    dist.barrier()
    dist.destroy_process_group()


def run(fn, world, port_base, timeout=120):
    """Runs fn(rank) on world spawned processes joined by gloo; returns rank 0's result."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = port_base + os.getpid() % 1000
    ps = [ctx.Process(target=_rank, args=(fn, r, world, port, q)) for r in range(world)]
    for p in ps:
        p.start()
    res = q.get(timeout=timeout)
    for p in ps:
        p.join()
    return res
