"""The codec and the DDP hook on CUDA tensors give the CPU's bytes.

1. Codec on CUDA tensors against the same codec on CPU tensors, for every
   spec with a device path and sizes from 1 to 2^20 + 3: local_scale equal,
   payload bytes equal (with and without a shared scale), decode and
   decode_accumulate equal bit for bit; a NaN gradient is refused.
2. The reduce-scatter's steps on CUDA (slices, device sums, their decode)
   against the host's bytes and floats, W = 1 to 8.
3. terngrad_hook and terngrad_reduce_scatter_hook in DDP with CUDA buckets
   against the same run with CPU
   buckets: 2 gloo processes on one GPU (gloo reduces CUDA tensors through
   the host), and 1 NCCL process (NCCL takes CUDA tensors only). The
   model's gradients do not depend on its weights and are sums of small
   integers, exact in any order on either device, so every bucket's
   averaged gradient must be equal bit for bit, step after step, and the
   bytes each worker hands to the collectives too.
Exits 77 (ctest SKIP) without torch, without a CUDA device, or with a
libterngrad built without CUDA.
"""
import os
import sys
import tempfile

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:
    print("SKIPPED: %s (Debian: python3-torch)" % e)
    sys.exit(77)

import terngrad
import terngrad.torch as tgt
from ddp_test_util import recording_hook

if not torch.cuda.is_available():
    print("SKIPPED: no CUDA device (torch.cuda.is_available() is False)")
    sys.exit(77)
if not terngrad.cuda_available():
    print("SKIPPED: libterngrad at %s was built without CUDA or sees no device" % terngrad.library_path())
    sys.exit(77)

SPECS = ["terngrad", "terngrad:clip=0", "terngrad:share_scale=0", "terngrad:round=nearest",
         "terngrad:stream=philox10", "fp16", "fp32"]
SIZES = [1, 5, 1000, 100003, (1 << 20) + 3]
STEPS, SEED = 4, 9


def check_codec():
    gen = torch.Generator().manual_seed(1)
    for spec in SPECS:
        host, dev = terngrad.Codec(spec), terngrad.Codec(spec)
        for n in SIZES:
            x = torch.randn(n, generator=gen) * 1e-3
            xd = x.cuda()
            what = "%s n=%d" % (spec, n)
            s_host, s_dev = host.local_scale(x), dev.local_scale(xd)
            assert s_host == s_dev, "%s: local_scale %r on the CPU, %r on the GPU" % (what, s_host, s_dev)
            for shared in (None, s_host * 1.5):
                kw = dict(tensor_id=3, step=7, seed=11, shared_scale=shared)
                p_host, p_dev = host.encode(x, **kw), dev.encode(xd, **kw)
                assert p_dev.is_cuda and p_dev.dtype == torch.uint8, what
                assert torch.equal(p_host, p_dev.cpu()), "%s shared=%r: the GPU payload differs from the CPU's" % (
                    what, shared)
                d_host = host.decode(p_host, n=n)
                d_dev = dev.decode(p_dev, n=n)
                assert d_dev.is_cuda and torch.equal(d_host.view(torch.int32), d_dev.cpu().view(torch.int32)), (
                    "%s: decode differs" % what)
                acc = torch.randn(n, generator=gen)
                a_host, a_dev = acc.clone(), acc.cuda()
                host.decode_accumulate(p_host, a_host)
                dev.decode_accumulate(p_dev, a_dev)
                assert torch.equal(a_host.view(torch.int32), a_dev.cpu().view(torch.int32)), (
                    "%s: decode_accumulate differs" % what)
        # A non-finite gradient: the device reports it, as the host does.
        if spec.startswith("terngrad"):
            bad = torch.zeros(1000, device="cuda")
            bad[17] = float("nan")
            try:
                dev.local_scale(bad)
                dev.encode(bad, shared_scale=1.0)
            except terngrad.TernGradError as e:
                print("%s: a NaN gradient on the GPU: %s" % (spec, e))
            else:
                raise AssertionError("%s: a NaN gradient on the GPU was not refused" % spec)
    print("codec: %d specs x %d sizes: GPU == CPU (scale, payload, decode, accumulate)" % (len(SPECS), len(SIZES)))
    check_sixteen_bit()
    check_reduce_scatter_codec()


def check_sixteen_bit():
    """16-bit CUDA gradients: terngrad's device encoder reads the halves and
    writes the CPU's bytes of the same halves (themselves the bytes of their
    float32 values); fp32 and fp16 take float32 device gradients only, as
    device_takes says, and the hook then widens the bucket first."""
    gen = torch.Generator().manual_seed(2)
    for dtype in (torch.bfloat16, torch.float16):
        for spec in ("terngrad", "terngrad:round=nearest"):
            host, dev = terngrad.Codec(spec), terngrad.Codec(spec)
            assert dev.device_takes(dtype), "%s: device_takes(%s) is False" % (spec, dtype)
            for n in SIZES:
                x = (torch.randn(n, generator=gen) * 1e-3).to(dtype)
                what = "%s %s n=%d" % (spec, dtype, n)
                s_host, s_dev = host.local_scale(x), dev.local_scale(x.cuda())
                assert s_host == s_dev == host.local_scale(x.float()), "%s: local scales differ" % what
                kw = dict(tensor_id=2, step=5, seed=13, shared_scale=s_host * 1.25)
                p_host, p_dev = host.encode(x, **kw), dev.encode(x.cuda(), **kw)
                assert torch.equal(p_host, p_dev.cpu()), "%s: the GPU payload differs from the CPU's" % what
        for spec in ("fp32", "fp16"):
            assert not terngrad.Codec(spec).device_takes(dtype), "%s: device_takes(%s) is True" % (spec, dtype)
            try:
                terngrad.Codec(spec).encode(torch.zeros(8, dtype=dtype, device="cuda"))
            except terngrad.TernGradError as e:
                assert "float32 device gradients only" in str(e), str(e)
            else:
                raise AssertionError("%s took a %s CUDA gradient" % (spec, dtype))
    print("16-bit CUDA gradients: terngrad GPU == CPU; fp32/fp16 refuse them by name")


def check_reduce_scatter_codec():
    """The reduce-scatter's three device steps against the host's: slices
    of a CUDA gradient (float32 and bfloat16) encode to the host's bytes,
    their sums aggregate on the device to the host's bytes, and decode to
    the host's floats; a payload of another scale is found by device_check;
    codecs whose sums stay on the host say so."""
    gen = torch.Generator().manual_seed(3)
    for spec in ("terngrad", "terngrad:round=nearest"):
        for world in (1, 2, 4, 8):
            for n in (5, 1000, 100003):
                for dtype in (torch.float32, torch.bfloat16):
                    host, dev = terngrad.Codec(spec), terngrad.Codec(spec)
                    grads = [(torch.randn(n, generator=gen) * 1e-3).to(dtype) for _ in range(world)]
                    shared = max(host.local_scale(g) for g in grads)
                    begins, lengths = tgt.chunk_bounds(n, world)
                    what = "%s W=%d n=%d %s" % (spec, world, n, dtype)
                    sent_h = [host.encode_slices(g, begins, lengths, tensor_id=4, step=6, seed=r, shared_scale=shared)
                              for r, g in enumerate(grads)]
                    sent_d = [dev.encode_slices(g.cuda(), begins, lengths, tensor_id=4, step=6, seed=r,
                                                shared_scale=shared) for r, g in enumerate(grads)]
                    for r in range(world):
                        for j in range(world):
                            assert torch.equal(sent_h[r][j], sent_d[r][j].cpu()), (
                                "%s: rank %d slice %d: the GPU payload differs" % (what, r, j))
                    for j in range(world):
                        sum_h = host.aggregate([sent_h[r][j] for r in range(world)], lengths[j])
                        sum_d = dev.aggregate([sent_d[r][j] for r in range(world)], lengths[j])
                        dev.device_check(sum_d)
                        assert torch.equal(sum_h, sum_d.cpu()), "%s slice %d: the GPU sum differs" % (what, j)
                        if lengths[j] == 0:
                            continue
                        out_h = torch.empty(lengths[j])
                        out_d = torch.full((lengths[j],), 7.0, device="cuda")
                        host.decode_aggregate(sum_h, out_h)
                        dev.decode_aggregate(sum_d, out_d)
                        dev.device_check(out_d)
                        assert torch.equal(out_h.view(torch.int32), out_d.cpu().view(torch.int32)), (
                            "%s slice %d: the GPU's decoded sum differs" % (what, j))
    # Payloads of two scales: found on the device, the output left as it was.
    dev = terngrad.Codec("terngrad")
    x = torch.randn(1000, generator=gen).cuda() * 1e-3
    a = dev.encode_slices(x, [0], [1000], shared_scale=dev.local_scale(x))[0]
    b = dev.encode_slices(x, [0], [1000], shared_scale=2 * dev.local_scale(x))[0]
    dev.device_check(dev.aggregate([a, a], 1000))
    try:
        out = dev.aggregate([a, b], 1000)
        dev.device_check(out)
    except terngrad.TernGradError as e:
        assert "SCALE" in str(e).upper(), str(e)
    else:
        raise AssertionError("payloads of two scales summed on the GPU")
    # Codecs whose sums stay on the host say so before any device work.
    for spec in ("terngrad:share_scale=0", "fp32"):
        c = terngrad.Codec(spec)
        p = c.encode(torch.zeros(8, device="cuda"))
        try:
            c.aggregate([p, p], 8)
        except (ValueError, terngrad.TernGradError) as e:
            print("%s: no device sum: %s" % (spec, e))
        else:
            raise AssertionError("%s summed CUDA payloads" % spec)
    print("reduce-scatter steps on CUDA: slices, sums and decoded sums == the CPU's (W = 1, 2, 4, 8)")


class WeightFreeGradients(torch.nn.Module):
    """Two layers whose loss is linear in their outputs with integer
    coefficients: d loss / d weight = coefficients^T x, integer sums
    independent of the weights, exact on any device in any order."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(64, 96)
        self.b = torch.nn.Linear(32, 40)

    def forward(self, xa, xb, ca, cb):
        return (self.a(xa) * ca).sum() + (self.b(xb) * cb).sum()


def run_rank(rank, world, backend, device, init_file, result_file, hook="terngrad_hook"):
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank, world_size=world)
    model = WeightFreeGradients().to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)  # several buckets
    state = tgt.TernGradState(seed=SEED)
    record = []
    ddp.register_comm_hook(state, recording_hook(getattr(tgt, hook), record))
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(STEPS):
        ints = lambda *shape: torch.randint(-2, 3, shape, generator=gen).float().to(device)
        ddp.zero_grad()
        ddp(ints(16, 64), ints(16, 32), ints(16, 96), ints(16, 40)).backward()
    torch.cuda.synchronize() if device == "cuda" else None
    torch.save({"buckets": [(i, it, out.cpu()) for i, it, _inp, out in record], "bytes_sent": state.bytes_sent},
               result_file)
    dist.destroy_process_group()


def run(world, backend, device, tmp, hook="terngrad_hook"):
    init_file = os.path.join(tmp, "init-%s-%s-%s" % (backend, device, hook))
    results = [os.path.join(tmp, "result-%s-%s-%s-%d" % (backend, device, hook, r)) for r in range(world)]
    if world == 1:
        run_rank(0, 1, backend, device, init_file, results[0], hook)
    else:
        mp.spawn(lambda_free_rank, args=(world, backend, device, init_file, results, hook), nprocs=world, join=True)
    return [torch.load(f) for f in results]


def lambda_free_rank(rank, world, backend, device, init_file, results, hook):
    run_rank(rank, world, backend, device, init_file, results[rank], hook)


def same_run(cpu, gpu, what):
    for rank, (c, g) in enumerate(zip(cpu, gpu)):
        assert len(c["buckets"]) == len(g["buckets"]) > 0, "%s rank %d: %d buckets on the CPU, %d on the GPU" % (
            what, rank, len(c["buckets"]), len(g["buckets"]))
        for (ci, cit, cout), (gi, git, gout) in zip(c["buckets"], g["buckets"]):
            assert (ci, cit) == (gi, git), "%s rank %d: bucket order differs" % (what, rank)
            assert torch.equal(cout.view(torch.int32), gout.view(torch.int32)), (
                "%s rank %d bucket %d step %d: the averaged gradient differs between CPU and GPU buckets" % (
                    what, rank, ci, cit))
        assert c["bytes_sent"] == g["bytes_sent"], "%s rank %d: %d bytes sent on the CPU, %d on the GPU" % (
            what, rank, c["bytes_sent"], g["bytes_sent"])
    print("%s: %d buckets per rank, GPU == CPU bit for bit; %d bytes sent per worker" % (
        what, len(cpu[0]["buckets"]), cpu[0]["bytes_sent"]))


def main():
    check_codec()
    with tempfile.TemporaryDirectory() as tmp:
        for hook in ("terngrad_hook", "terngrad_reduce_scatter_hook"):
            cpu2 = run(2, "gloo", "cpu", tmp, hook)
            same_run(cpu2, run(2, "gloo", "cuda", tmp, hook), "%s: DDP 2 gloo ranks, CUDA buckets" % hook)
            if dist.is_nccl_available():
                same_run(run(1, "gloo", "cpu", tmp, hook), run(1, "nccl", "cuda", tmp, hook),
                         "%s: DDP 1 NCCL rank, CUDA buckets" % hook)
            else:
                print("NCCL not available in this PyTorch: the NCCL run is left out")
    print("PASSED")


if __name__ == "__main__":
    main()
