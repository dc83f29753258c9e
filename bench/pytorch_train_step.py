#!/usr/bin/env python3
"""PyTorch eager baseline for train_step_bench: one SGD-momentum training step
of LeNet and CifarNet (batch 64, NHWC-equivalent architectures from the
TernGrad paper) on the CPU with a fixed thread count.

Prints one JSON object: {"torch": version, "threads": n, "lenet": examples/s,
"cifarnet": examples/s}. Run with Debian's python3 (python3-torch).
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

from pytorch_models import CifarNet, LeNet  # beside this script


def examples_per_sec(model, shape, steps, batch=64):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, *shape)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(5):
        step()
    best = float("inf")
    for _ in range(3):  # best of three timed windows: the machine is shared
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - t0) / steps)
    return batch / best


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(),
           "lenet": examples_per_sec(LeNet(), (1, 28, 28), 20),
           "cifarnet": examples_per_sec(CifarNet(), (3, 24, 24), 10)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
