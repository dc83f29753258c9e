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
import torch.nn as nn
import torch.nn.functional as F


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5, padding=2)
        self.conv2 = nn.Conv2d(20, 50, 5, padding=2)
        self.fc1 = nn.Linear(7 * 7 * 50, 500)
        self.fc2 = nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


class CifarNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 5, padding=2)
        self.conv2 = nn.Conv2d(64, 64, 5, padding=2)
        self.fc1 = nn.Linear(6 * 6 * 64, 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, 10)
        # TF LRN(depth_radius=4, bias=1, alpha=0.001/9, beta=0.75): torch's
        # LocalResponseNorm divides alpha by the window size (9), so scale it back.
        self.lrn = nn.LocalResponseNorm(9, alpha=0.001 / 9 * 9, beta=0.75, k=1.0)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.pad(x, (0, 1, 0, 1), value=float("-inf")), 3, 2)  # TF SAME 24 -> 12
        x = self.lrn(x)
        x = self.lrn(F.relu(self.conv2(x)))
        x = F.max_pool2d(F.pad(x, (0, 1, 0, 1), value=float("-inf")), 3, 2)  # 12 -> 6
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


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
