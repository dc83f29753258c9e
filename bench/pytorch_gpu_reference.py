#!/usr/bin/env python3
"""PyTorch references for the GPU benchmarks (issue 6), on the same GPU:

1. Codec encode: a straightforward TernGrad encode in PyTorch (stats, clip,
   Bernoulli draw, 2-bit packing 4 codes per byte), vs a device-to-device copy
   of the same tensor, in GB/s of float32 input.
2. Training step, eager: N virtual workers (sequential replicas on one
   stream), each forward/backward at batch B, per-variable TernGrad
   ternarization of the gradient, the average, SGD momentum, for LeNet and
   CifarNet and AlexNet as the C++ models define them (TF SAME pooling, TF LRN).

Prints JSON lines. Compare with codec_cuda_bench and gpu_train_step_bench.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

from pytorch_models import AlexNet, CifarNet, LeNet  # beside this script


def timed(fn, reps=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def terngrad_encode(g, clip=2.5):
    """The obvious PyTorch encode: codes in {0: zero, 1: +s, 2: -s} packed 4 per byte."""
    sigma = g.std(unbiased=False)
    s = torch.minimum(g.abs().max(), clip * sigma)
    p = (g.abs().clamp(max=s) / s)
    keep = torch.rand_like(g) < p
    codes = torch.where(keep, torch.where(g > 0, 1, 2), 0).to(torch.uint8)
    pad = (-codes.numel()) % 4
    if pad:
        codes = torch.cat([codes, codes.new_zeros(pad)])
    c = codes.view(-1, 4)
    packed = c[:, 0] | (c[:, 1] << 2) | (c[:, 2] << 4) | (c[:, 3] << 6)
    return s, packed


def ternarize(g, clip=2.5):
    sigma = g.std(unbiased=False)
    s = torch.minimum(g.abs().max(), clip * sigma)
    # s == 0 keeps nothing (p = 0 / 1) without a host sync to test for it.
    p = g.abs().clamp(max=s) / torch.where(s > 0, s, torch.ones_like(s))
    keep = torch.rand_like(g) < p
    return torch.where(keep, s * torch.sign(g), torch.zeros_like(g))


def check_encode(n=10007):
    """Before timing: the packed codes decode to s*sign(g) or 0, never the other
    sign, and their mean over draws approaches the clipped gradient."""
    g = torch.randn(n, device="cuda")
    total = torch.zeros_like(g)
    draws = 200
    for _ in range(draws):
        s, packed = terngrad_encode(g)
        c = torch.stack([(packed >> k) & 3 for k in (0, 2, 4, 6)], dim=1).reshape(-1)[:n]
        if bool((c == 3).any()) or bool(((c == 1) & (g <= 0)).any()) or bool(((c == 2) & (g >= 0)).any()):
            raise SystemExit("PyTorch reference encode: a code contradicts its gradient's sign")
        total += torch.where(c == 1, s, torch.where(c == 2, -s, torch.zeros_like(s)))
    err = (total / draws - g.clamp(-float(s), float(s))).abs().mean().item()
    if err > 0.1:
        raise SystemExit("PyTorch reference encode: mean of %d draws is %.3f off the clipped gradient" % (draws, err))


def train_step_examples_per_sec(cls, workers, batch, codec):
    dev = "cuda"
    model = cls().to(dev)
    params = list(model.parameters())
    bufs = [torch.zeros_like(p) for p in params]
    xs = [torch.randn(batch, *cls.shape, device=dev) for _ in range(workers)]
    ys = [torch.randint(0, 10, (batch,), device=dev) for _ in range(workers)]

    def step():
        total = [torch.zeros_like(p) for p in params]
        for w in range(workers):
            for p in params:
                p.grad = None
            F.cross_entropy(model(xs[w]), ys[w]).backward()
            with torch.no_grad():
                for t, p in zip(total, params):
                    g = p.grad + 5e-4 * p
                    t += ternarize(g) if codec == "terngrad" else g
        with torch.no_grad():
            for p, b, t in zip(params, bufs, total):
                b.mul_(0.9).add_(t / workers)
                p.sub_(0.01 * b)

    sec = timed(step, reps=20)
    return workers * batch / sec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--codec_elements", type=int, default=1 << 26)
    ap.add_argument("--nets", default="lenet,cifarnet,alexnet")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device visible to torch"}))
        return
    torch.backends.cudnn.benchmark = True
    check_encode()
    n = a.codec_elements
    g = torch.randn(n, device="cuda")
    out = torch.empty_like(g)
    copy_s = timed(lambda: out.copy_(g))
    enc_s = timed(lambda: terngrad_encode(g), reps=20)
    print(json.dumps({"what": "codec", "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                      "elements": n, "d2d_copy_GBps_read_plus_write": 8 * n / copy_s / 1e9,
                      "torch_encode_GBps_input": 4 * n / enc_s / 1e9, "torch_encode_ms": 1e3 * enc_s}))
    nets = {"lenet": LeNet, "cifarnet": CifarNet, "alexnet": AlexNet}
    # PyTorch's default runs cuDNN convolutions in TF32 (torch.backends.cudnn.allow_tf32); ours
    # run in fp32 to match the CPU. Lines with "tf32": false are the like-for-like baseline.
    for tf32 in (True, False):
        torch.backends.cudnn.allow_tf32 = tf32
        for name in a.nets.split(","):
            cls = nets[name]
            for codec in ("terngrad", "fp32"):
                eps = train_step_examples_per_sec(cls, a.workers, a.batch, codec)
                print(json.dumps({"what": "train_step", "net": cls.__name__.lower(), "codec": codec, "tf32": tf32,
                                  "workers": a.workers, "batch": a.batch, "examples_per_sec": eps}), flush=True)


if __name__ == "__main__":
    main()
