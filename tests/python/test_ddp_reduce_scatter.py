"""terngrad.torch.terngrad_reduce_scatter_hook in real DDP training: 3
processes, gloo (uneven slices, 3-bit sums).

1. The C API's slice encode and sum, without DDP: slices of any cut decode
   to the whole payload's decoding; the sum of 3 shared-scale payloads is
   integer counts (40 + ceil(3n/8) bytes, as aggregate_bytes says) decoding
   to the sum of decodings.
2. For every bucket of the first step (every rank's input is the same in
   both runs), the reduce-scatter hook's output equals the all-gather
   hook's (terngrad_hook, checked against a float64 reference by
   test_ddp_hook.py) up to the rounding of the sum (s * count in one
   rounding against W float adds); ef(...) specs too.
3. Replicas stay bit-identical over all steps, and every rank receives
   exactly (W-1) slice payloads and (W-1) padded sums per bucket: about
   (2 + 3) * 2/3 bits per element at W = 3, against the all-gather's 2 * 2.
4. bf16 and fp16 buckets, both hooks: the result in the bucket's dtype is the
   float32 copy's result cast to it, bit for bit; float64 is refused by name.
5. terngrad_auto_hook runs the variant auto_variant picks, bit for bit.
6. in_background(hook), in DDP training: the same averaged gradients and
   final weights as the hook itself, bit for bit, both hooks, ef(...) too.
7. spec="auto": on a fast link a bucket goes fp32, bit for bit PyTorch's
   all-reduce; on a slow one ef(terngrad:round=nearest), bit for bit that
   codec's hook; a layout that goes fp32 after an ef one first sends the
   residuals its parameters owe; every rank takes rank 0's choice; bad
   candidates and rates are refused by name.
8. spec="auto" revisits its choice when a recheck finds the link moved by
   more than 2x: decided for 1 Mbit/s, the recheck measures loopback, every
   rank switches the layout to fp32 at the same step and sends the residual
   it owes; a recheck that finds the same rate changes nothing.
Exits 77 (ctest SKIP) without torch.
"""
import os
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:
    print("SKIPPED: %s (Debian: python3-torch, python3-numpy)" % e)
    sys.exit(77)

import terngrad
import terngrad.torch as tgt
from ddp_test_util import recording_hook, train_random

WORLD, STEPS = 3, 3


def check_slices_and_sums():
    rng = np.random.default_rng(1)
    for spec in ("terngrad", "terngrad:pack=entropy", "fp16"):
        codec = terngrad.Codec(spec)
        n = 10001
        grads = [rng.standard_normal(n).astype(np.float32) * 1e-3 for _ in range(WORLD)]
        shared = max(codec.local_scale(g) for g in grads) if codec.wants_shared_scale else None
        whole = [codec.encode(g, tensor_id=2, step=4, seed=9 + w, shared_scale=shared) for w, g in enumerate(grads)]
        for cut in ((0, 4000, 4004, 9996), (0, 10000), (0, 16, 5000)):
            begins = list(cut)
            lengths = [b2 - b1 for b1, b2 in zip(begins, begins[1:] + [n])]
            parts = codec.encode_slices(grads[0], begins, lengths, tensor_id=2, step=4, seed=9,
                                        shared_scale=shared)
            got = np.concatenate([codec.decode(p, n=m) for p, m in zip(parts, lengths)])
            assert np.array_equal(got, codec.decode(whole[0], n=n)), "%s: slices %s decode to another tensor" % (spec, cut)
        total = codec.aggregate(whole, n)
        summed = codec.decode_aggregate(total, np.empty(n, np.float32))
        want = np.zeros(n, np.float64)
        for p in whole:
            want += codec.decode(p, n=n)
        assert np.allclose(summed, want, rtol=0, atol=1e-6 * max(1e-30, np.abs(want).max())), spec
        if spec == "terngrad":
            assert total.size == 40 + (3 * n + 7) // 8, "3 shared-scale payloads sum to 3 bits per element"
            assert codec.aggregate_bytes(n, WORLD) == total.size, (codec.aggregate_bytes(n, WORLD), total.size)
        if spec == "terngrad:pack=entropy":
            assert codec.aggregate_bytes(n, WORLD) is None, "an entropy-coded sum's length depends on the payloads"
    try:
        terngrad.Codec("terngrad").encode_slices(np.zeros(16, np.float32), [2], [8])
        raise AssertionError("a slice starting at element 2 was accepted")
    except terngrad.TernGradError as e:
        assert "4" in str(e), str(e)


def make_model():
    # 4.5 MB of parameters: DDP's first bucket closes after the 4 MB weight,
    # the rest is a second one (after the rebuild; one bucket before it).
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                               torch.nn.ReLU(), torch.nn.Linear(1024, 10))


def run(rank, spec, hook, record):
    model = torch.nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=0.5)
    state = tgt.TernGradState(spec=spec, seed=3, module=model.module)
    model.register_comm_hook(state, recording_hook(hook, record))
    train_random(model, rank, STEPS, 16)
    return model, state


class Bucket:
    """A GradBucket stand-in around one tensor (gloo in PyTorch 1.13 cannot
    broadcast bf16, so DDP cannot be built around a bf16 model; the hooks
    themselves only exchange bytes and float32 scales)."""

    def __init__(self, tensor, param):
        self._tensor, self._param = tensor, param

    def index(self):
        return 0

    def buffer(self):
        return self._tensor

    def parameters(self):
        return [self._param]

    def is_last(self):
        return True


def check_sixteen_bit_buckets(rank):
    """bf16 and fp16 buckets: each hook's result, in the bucket's dtype, is
    its result on the float32 copy of the bucket cast to that dtype, bit for
    bit; a float64 bucket is refused naming its dtype, before any collective."""
    gen = torch.Generator().manual_seed(rank)
    param = torch.nn.Parameter(torch.empty(5003))
    for dtype in (torch.bfloat16, torch.float16):
        for hook in (tgt.terngrad_hook, tgt.terngrad_reduce_scatter_hook):
            for spec in ("terngrad", "ef(terngrad:round=nearest)"):
                # The encoders read the halves directly; three steps carry ef's residual.
                low_state = tgt.TernGradState(seed=4, spec=spec)
                full_state = tgt.TernGradState(seed=4, spec=spec)
                for _ in range(3):
                    g = (torch.randn(5003, generator=gen) * 1e-3).to(dtype)
                    low = hook(low_state, Bucket(g.clone(), param)).wait()
                    full = hook(full_state, Bucket(g.float(), param)).wait()
                    assert low.dtype == dtype, "%s returned %s for a %s bucket" % (hook.__name__, low.dtype, dtype)
                    assert torch.equal(low, full.to(dtype)), "%s %s: the %s bucket's result is not its float32 " \
                        "copy's" % (hook.__name__, spec, dtype)
    # Buckets smaller than W slices of 4: some ranks' slices are empty.
    for n in (1, 5, 13):
        small = torch.nn.Parameter(torch.empty(n))
        g = torch.randn(n, generator=gen)
        a = tgt.terngrad_hook(tgt.TernGradState(seed=2), Bucket(g.clone(), small)).wait()
        r = tgt.terngrad_reduce_scatter_hook(tgt.TernGradState(seed=2), Bucket(g.clone(), small)).wait()
        assert float((a - r).abs().max()) <= 1e-6 * float(a.abs().max() * WORLD + 1e-30), "n=%d: hooks differ" % n
    try:
        tgt.terngrad_hook(tgt.TernGradState(), Bucket(torch.zeros(8, dtype=torch.float64), param))
        raise AssertionError("a float64 bucket was accepted")
    except TypeError as e:
        assert "torch.float64" in str(e), str(e)


def check_auto_hook(rank):
    """terngrad_auto_hook runs the variant auto_variant names: at W = 3 the
    all-gather by default, the reduce-scatter with reduce_scatter_from=3;
    bit for bit each hook's own result."""
    assert tgt.auto_variant(3, False) is tgt.terngrad_hook
    assert tgt.auto_variant(4, False) is tgt.terngrad_reduce_scatter_hook
    assert tgt.auto_variant(512, True) is tgt.terngrad_reduce_scatter_hook, "CUDA buckets summed on the device"
    assert tgt.auto_variant(512, True, device_sum=False) is tgt.terngrad_hook, "CUDA buckets of a host-only sum"
    assert tgt.auto_variant(3, True) is tgt.terngrad_hook
    param = torch.nn.Parameter(torch.empty(5003))
    g = torch.randn(5003, generator=torch.Generator().manual_seed(10 + rank))
    for reduce_scatter_from, same_as in ((4, tgt.terngrad_hook), (3, tgt.terngrad_reduce_scatter_hook)):
        state = tgt.TernGradState(seed=4, reduce_scatter_from=reduce_scatter_from)
        auto = tgt.terngrad_auto_hook(state, Bucket(g.clone(), param)).wait()
        own = same_as(tgt.TernGradState(seed=4), Bucket(g.clone(), param)).wait()
        assert torch.equal(auto, own), "auto hook (reduce_scatter_from=%d) is not %s" % (
            reduce_scatter_from, same_as.__name__)
    try:
        tgt.TernGradState(reduce_scatter_from=1)
        raise AssertionError("reduce_scatter_from=1 was accepted")
    except ValueError as e:
        assert "reduce_scatter_from" in str(e), str(e)


def check_in_background(rank):
    """in_background: every bucket's averaged gradient and the final weights
    equal the hook's own run, bit for bit (the buckets overlap the backward
    pass, one at a time on the worker thread, in the order handed over)."""
    for hook in (tgt.terngrad_hook, tgt.terngrad_reduce_scatter_hook):
        for spec in ("terngrad", "ef(terngrad:round=nearest)"):
            own, bg = [], []
            m1, _ = run(rank, spec, hook, own)
            m2, state = run(rank, spec, tgt.in_background(hook), bg)
            assert len(own) == len(bg) > 0, (len(own), len(bg))
            for a, b in zip(own, bg):
                assert (a[0], a[1]) == (b[0], b[1]) and torch.equal(a[3], b[3]), (
                    "%s %s bucket %d step %d: in_background differs" % (hook.__name__, spec, a[0], a[1]))
            for p1, p2 in zip(m1.parameters(), m2.parameters()):
                assert torch.equal(p1, p2), "%s %s: in_background trained other weights" % (hook.__name__, spec)
            assert state.iteration == STEPS, state.iteration


class TwoParamBucket(Bucket):
    def __init__(self, tensor, params, index=0):
        super().__init__(tensor, None)
        self._params, self._index = params, index

    def parameters(self):
        return self._params

    def index(self):
        return self._index


def check_auto_codec(rank):
    """The decisions below do not hang on the measured costs: at 100 Gbit/s
    the latency of the compressed path's extra collectives alone makes fp32
    faster for 5003 elements, at 1 Mbit/s its bytes alone make it 10x slower."""
    ef = terngrad.auto_candidates("auto(%s)" % "ef(terngrad:round=nearest)", sync=False)[0]
    gen = torch.Generator().manual_seed(20 + rank)
    param = torch.nn.Parameter(torch.empty(5003))
    g = torch.randn(5003, generator=gen) * 1e-3
    fast = tgt.TernGradState(spec="auto", link_rate="100gbit", seed=4)
    got = tgt.terngrad_auto_hook(fast, Bucket(g.clone(), param)).wait()
    want = tgt.allreduce_hook(tgt.AllReduceState(), Bucket(g.clone(), param)).wait()
    assert fast.choices[0]["spec"] == "fp32", fast.choices
    assert torch.equal(got, want), "auto at 100 Gbit/s is not PyTorch's all-reduce"
    slow = tgt.TernGradState(spec="auto", link_rate="1mbit", seed=4)
    got = tgt.terngrad_auto_hook(slow, Bucket(g.clone(), param)).wait()
    want = tgt.terngrad_auto_hook(tgt.TernGradState(spec=ef, seed=4), Bucket(g.clone(), param)).wait()
    assert slow.choices[0]["spec"] == ef, slow.choices
    assert torch.equal(got, want), "auto at 1 Mbit/s is not the ef hook"
    # A layout of ef (two parameters), then one of them alone over a fast link:
    # it goes fp32 and first adds the residual it owes.
    p1, p2 = torch.nn.Parameter(torch.empty(3000)), torch.nn.Parameter(torch.empty(2003))
    tgt.terngrad_auto_hook(slow, TwoParamBucket(g.clone(), [p1, p2])).wait()
    owed = slow._parts(tuple(id(p) for p in (p1, p2)))[0].residual.copy()
    assert np.abs(owed).max() > 0
    slow.link_rate = 1e13
    g1 = torch.randn(3000, generator=gen) * 1e-3
    got = tgt.terngrad_auto_hook(slow, TwoParamBucket(g1.clone(), [p1], index=1)).wait()
    want = tgt.allreduce_hook(tgt.AllReduceState(), Bucket(g1 + torch.from_numpy(owed), p1)).wait()
    assert slow.choices[-1]["spec"] == "fp32" and torch.equal(got, want), "the owed residual was not sent"
    assert id(p1) not in slow._pending, "the residual is still kept after it was sent"
    # The link measured on the group; every rank runs rank 0's choice.
    measured = tgt.TernGradState(spec="auto(fp32,terngrad)", seed=4)
    tgt.terngrad_auto_hook(measured, Bucket(g.clone(), param)).wait()
    assert measured.link_rate > 0
    mine = torch.tensor([measured.candidates.index(measured.choices[0]["spec"])])
    everyone = [torch.empty_like(mine) for _ in range(WORLD)]
    dist.all_gather(everyone, mine)
    assert all(int(e) == int(mine) for e in everyone), "the ranks chose differently"
    for bad, says in (({"spec": "auto(fp32,zstd)"}, "zstd"), ({"spec": "auto", "link_rate": "fast"}, "fast"),
                      ({"spec": "terngrad", "link_rate": "1gbit"}, "link_rate")):
        try:
            tgt.TernGradState(**bad)
            raise AssertionError("accepted %r" % bad)
        except (ValueError, terngrad.TernGradError) as e:
            assert says in str(e), str(e)


def check_auto_revisit(rank):
    ef = terngrad.auto_candidates("auto(%s)" % "ef(terngrad:round=nearest)", sync=False)[0]
    gen = torch.Generator().manual_seed(40 + rank)
    param = torch.nn.Parameter(torch.empty(5003))
    state = tgt.TernGradState(spec="auto", link_rate="1mbit", seed=4, recheck_steps=2)
    twin = tgt.TernGradState(spec=ef, seed=4)  # what the layout runs until the revisit
    for step in range(2):  # each stand-in bucket is a step's last
        g = torch.randn(5003, generator=gen) * 1e-3
        got = tgt.terngrad_auto_hook(state, Bucket(g.clone(), param)).wait()
        assert torch.equal(got, tgt.terngrad_auto_hook(twin, Bucket(g.clone(), param)).wait()), step
    assert [c["spec"] for c in state.choices] == [ef] and not state.revisits, state.choices
    owed = twin._parts(next(iter(twin._codecs)))[0].residual.copy()
    assert np.abs(owed).max() > 0
    # Step 2 begins with the recheck: loopback is far above 1 Mbit/s.
    g = torch.randn(5003, generator=gen) * 1e-3
    got = tgt.terngrad_auto_hook(state, Bucket(g.clone(), param)).wait()
    assert len(state.revisits) == 1 and state.revisits[0]["step"] == 2, state.revisits
    assert state.revisits[0]["from_bytes_per_s"] == 125000.0 and state.link_rate > 2 * 125000.0, state.revisits
    assert state.choices[-1]["spec"] == "fp32", state.choices
    want = tgt.allreduce_hook(tgt.AllReduceState(), Bucket(g + torch.from_numpy(owed), param)).wait()
    assert torch.equal(got, want), "the switch to fp32 did not send the owed residual"
    everyone = [torch.empty(1, dtype=torch.float64) for _ in range(WORLD)]
    dist.all_gather(everyone, torch.tensor([state.link_rate], dtype=torch.float64))
    assert all(float(e) == state.link_rate for e in everyone), "the ranks revisited with different rates"
    # The next recheck (step 4) finds a rate within 2x (given here: loopback's
    # own varies too much under load to be the test's input): nothing moves.
    measure, decided = tgt._measure_link, state.link_rate
    tgt._measure_link = lambda group, world, device: decided * 1.9
    try:
        for _ in range(3):
            tgt.terngrad_auto_hook(state, Bucket(torch.randn(5003, generator=gen) * 1e-3, param)).wait()
    finally:
        tgt._measure_link = measure
    assert state.iteration == 6 and len(state.revisits) == 1 and len(state.choices) == 2, (state.revisits,
                                                                                      state.choices)
    for bad in (-1, 1.5):
        try:
            tgt.TernGradState(spec="auto", recheck_steps=bad)
            raise AssertionError("accepted recheck_steps=%r" % bad)
        except ValueError as e:
            assert "recheck_steps" in str(e), str(e)


def worker(rank, tmp):
    dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "init"), rank=rank, world_size=WORLD)
    try:
        check_sixteen_bit_buckets(rank)
        check_auto_hook(rank)
        check_in_background(rank)
        check_auto_codec(rank)
        check_auto_revisit(rank)
        for spec in ("terngrad", "ef(terngrad:round=nearest)"):
            ag, rs = [], []
            run(rank, spec, tgt.terngrad_hook, ag)
            model, state = run(rank, spec, tgt.terngrad_reduce_scatter_hook, rs)
            # 2. First step: same inputs, the two hooks agree.
            first_ag = [e for e in ag if e[1] == 0]
            first_rs = [e for e in rs if e[1] == 0]
            assert len(first_ag) == len(first_rs) >= 1
            assert len({e[0] for e in rs}) >= 2, "expected several buckets after DDP's rebuild"
            for a, r in zip(first_ag, first_rs):
                assert torch.equal(a[2], r[2]), "the runs' first-step inputs differ"
                scale = float(a[3].abs().max()) * WORLD
                diff = float((a[3] - r[3]).abs().max())
                assert diff <= 1e-6 * max(scale, 1e-30), "%s bucket %d: reduce-scatter differs from all-gather by %g" % (
                    spec, a[0], diff)
            # 3. Replicas, and the bytes received.
            params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
            everyone = [torch.empty_like(params) for _ in range(WORLD)]
            dist.all_gather(everyone, params)
            assert all(torch.equal(everyone[0], p) for p in everyone), "replicas diverged under %s" % spec
            if spec == "terngrad":
                codec = terngrad.Codec(spec)
                want = 0
                for e in rs:
                    n = e[2].numel()
                    _, lengths = tgt.chunk_bounds(n, WORLD)
                    longest = max(40 + (3 * m + 7) // 8 if m else 40 for m in lengths)
                    want += (WORLD - 1) * (codec.payload_bytes(lengths[rank]) + longest)
                assert state.bytes_received == want, (state.bytes_received, want)
                elements = sum(e[2].numel() for e in rs)
                if rank == 0:
                    print("received per element: %.3f bits (reduce-scatter), (2 + 3) * 2/3 = 3.333 plus headers" %
                          (8.0 * state.bytes_received / elements))
    finally:
        dist.destroy_process_group()


def main():
    check_slices_and_sums()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(tmp,), nprocs=WORLD, join=True)
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
