#!/usr/bin/env python3
"""Data-parallel training with PyTorch DDP on the gloo backend, once with the
default all-reduce of float32 gradients and once with the TernGrad hook
(terngrad.torch.terngrad_hook), on the same data, seed and schedule.

An MLP (784-256-10) on Fashion-MNIST (the IDX files of Debian's
dataset-fashion-mnist); every worker draws its own shard of each global batch.
Reports, per hook: bytes each worker passes to the collectives per step, the
first and last training losses, test accuracy, and whether the replicas ended
with identical parameters.

    PYTHONPATH=python TERNGRAD_LIBRARY=build/comm/capi/libterngrad.so.0.1 \\
        python3 python/examples/ddp_fashion_mnist.py --steps 600

--check turns the report into assertions (used by the ctest test).
"""
import argparse
import gzip
import json
import os
import struct
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print("SKIPPED: this example needs PyTorch and NumPy (Debian: python3-torch python3-numpy): %s" % e)
    sys.exit(77)  # ctest's SKIP_RETURN_CODE

import terngrad.torch as tgt

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path, limit):
    """The first `limit` records of an IDX file (images: N x 784 uint8; labels: N)."""
    with gzip.open(path, "rb") as f:
        magic = struct.unpack(">I", f.read(4))[0]
        if magic not in (2049, 2051):
            raise ValueError("%s: magic %d is not an IDX label (2049) or image (2051) file" % (path, magic))
        shape = struct.unpack(">%dI" % (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        n, record = min(shape[0], limit), int(np.prod(shape[1:]))
        data = f.read(n * record)
        if len(data) != n * record:
            raise ValueError("%s: truncated, %d of %d bytes" % (path, len(data), n * record))
        return np.frombuffer(data, np.uint8).reshape((n, record) if len(shape) > 1 else (n,))


def load(data_dir, split, limit):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz"), limit)
    y = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"), limit)
    # The TernGrad authors' input scaling: (x / 255 - 0.5) * 2.
    return torch.from_numpy((x.astype(np.float32) / 255.0 - 0.5) * 2.0), torch.from_numpy(y.astype(np.int64))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def make_hook(name, seed):
    if name == "allreduce":
        return tgt.AllReduceState(), tgt.allreduce_hook
    if name == "terngrad":
        return tgt.TernGradState(spec="terngrad", seed=seed), tgt.terngrad_hook
    raise ValueError("unknown hook %r (allreduce, terngrad)" % name)


def train(rank, world, hook_name, args, train_set, test_set):
    torch.manual_seed(args.seed)  # the same initial weights on every worker and for every hook
    model = nn.parallel.DistributedDataParallel(Mlp())
    state, hook = make_hook(hook_name, args.seed)
    model.register_comm_hook(state, hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    x_train, y_train = train_set
    order = torch.Generator().manual_seed(args.seed)  # the same batches for both hooks
    perm, pos, losses = torch.randperm(len(x_train), generator=order), 0, []
    start = time.time()
    for _ in range(args.steps):
        if pos + args.batch * world > len(perm):
            perm, pos = torch.randperm(len(x_train), generator=order), 0
        idx = perm[pos + rank * args.batch: pos + (rank + 1) * args.batch]  # this worker's shard
        pos += args.batch * world
        loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)  # for the report only (not counted)
        losses.append(mean_loss.item() / world)
    seconds = time.time() - start

    # Parameter localization: every replica must hold the same weights.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(copies, flat)
    identical = all(torch.equal(copies[0], c) for c in copies[1:])
    with torch.no_grad():
        x_test, y_test = test_set
        accuracy = (model.module(x_test).argmax(1) == y_test).float().mean().item()
    k = max(1, min(20, args.steps // 5))
    return {
        "hook": hook_name,
        "bytes_per_step": state.bytes_per_step(),
        "collective_calls_per_step": state.collective_calls / max(state.iteration, 1),
        "parameters": flat.numel(),
        "loss_first": float(np.mean(losses[:k])),
        "loss_last": float(np.mean(losses[-k:])),
        "test_accuracy": accuracy,
        "replicas_identical": identical,
        "seconds": seconds,
    }


def worker(rank, world, args, init_file, result_path):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=world)
    train_set = load(args.data, "train", args.train_limit)
    test_set = load(args.data, "test", args.test_limit)
    results = [train(rank, world, h, args, train_set, test_set) for h in args.hooks]
    dist.destroy_process_group()
    if rank == 0:
        tmp = result_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f)
        os.replace(tmp, result_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=64, help="examples per worker per step")
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--hooks", default="allreduce,terngrad")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--train-limit", type=int, default=60000)
    ap.add_argument("--test-limit", type=int, default=10000)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--check", action="store_true",
                    help="assert: losses fall, replicas identical, TernGrad sends ~16x fewer bytes")
    args = ap.parse_args()
    args.hooks = args.hooks.split(",")
    for h in args.hooks:
        make_hook(h, 0)  # an unknown name fails here, before any process starts
    if not os.path.exists(os.path.join(args.data, "train-images-idx3-ubyte.gz")):
        sys.exit("no Fashion-MNIST in %s (Debian: apt-get install dataset-fashion-mnist; or --data DIR)" % args.data)

    with tempfile.TemporaryDirectory() as tmp:
        result_path = os.path.join(tmp, "results.json")
        mp.spawn(worker, args=(args.world_size, args, os.path.join(tmp, "init"), result_path),
                 nprocs=args.world_size)
        with open(result_path) as f:
            results = json.load(f)

    base = next((r["bytes_per_step"] for r in results if r["hook"] == "allreduce"), None)
    print("%d workers (gloo), %d steps, batch %d per worker, MLP with %d parameters, seed %d" %
          (args.world_size, args.steps, args.batch, results[0]["parameters"], args.seed))
    print("%-10s %16s %8s %11s %10s %9s %10s %8s" % ("hook", "bytes/step/worker", "ratio", "loss first",
                                                  "loss last", "test acc", "identical", "seconds"))
    for r in results:
        ratio = base / r["bytes_per_step"] if base else float("nan")
        r["ratio_vs_allreduce"] = ratio
        print("%-10s %16.0f %7.2fx %11.4f %10.4f %8.2f%% %10s %8.1f" % (
            r["hook"], r["bytes_per_step"], ratio, r["loss_first"], r["loss_last"],
            100 * r["test_accuracy"], r["replicas_identical"], r["seconds"]))
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
        os.replace(args.json + ".tmp", args.json)

    if args.check:
        failures = []
        for r in results:
            if not r["loss_last"] < 0.8 * r["loss_first"]:
                failures.append("%s: loss did not fall (%.4f -> %.4f)" % (r["hook"], r["loss_first"], r["loss_last"]))
            if not r["replicas_identical"]:
                failures.append("%s: replicas diverged" % r["hook"])
            if not r["test_accuracy"] > 0.5:
                failures.append("%s: test accuracy %.3f is no better than 0.5" % (r["hook"], r["test_accuracy"]))
            if r["hook"] == "terngrad" and base and not 15.0 < r["ratio_vs_allreduce"] <= 16.0:
                failures.append("terngrad: %.2fx fewer bytes than all-reduce, expected 15-16x" % r["ratio_vs_allreduce"])
        if failures:
            sys.exit("check failed:\n  " + "\n  ".join(failures))
        print("check passed")


if __name__ == "__main__":
    main()
