"""TernGradState's error-feedback state across what DDP does (issue 33).

1. Bucket rebuilds, without DDP: a codec's ef(...) residual follows its
   parameters into the buckets of a new layout, element for element.
2. state_dict() / load_state_dict(): by parameter name, checked before
   anything changes; reshard_state_dicts() keeps the total error owed.
3. Real DDP, 2 processes, gloo: ef(terngrad:round=nearest) with small
   buckets trains through DDP's bucket rebuild (it used to stop at the first
   step after it: "the residual holds X elements, the gradient has Y"), and
   a run stopped after 3 steps and resumed from state_dict() (model,
   optimizer, hook state) ends bit-identical to the uninterrupted run.
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

import terngrad.torch as tgt
from terngrad import ef_state

EF = "ef(terngrad:clip=0,round=nearest)"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


class FakeBucket:
    """What the hook reads of a torch.distributed.GradBucket."""

    def __init__(self, index, params):
        self._index, self._params = index, params
        self._buffer = torch.cat([p.detach().reshape(-1) * 0.01 + 0.001 * (i + 1) for i, p in enumerate(params)])

    def index(self):
        return self._index

    def parameters(self):
        return self._params

    def buffer(self):
        return self._buffer


def encode_once(state, bucket):
    codec = state.codec_for(bucket)
    grad = bucket.buffer()
    scale = codec.local_scale(grad) if codec.wants_shared_scale else None
    codec.encode(grad, tensor_id=bucket.index(), step=0, seed=1, shared_scale=scale)
    return codec


def residual_of(codec, sizes):
    return ef_state.split(codec.state(), sizes)


def test_rebuild_carries_residuals():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 30), torch.nn.Linear(30, 5))
    w1, b1, w2, b2 = list(model.parameters())
    state = tgt.TernGradState(spec=EF, module=model)
    a = FakeBucket(0, [b2, w2, b1])
    codec = encode_once(state, a)
    before = residual_of(codec, [p.numel() for p in a.parameters()])
    check(before is not None and any(np.any(p.residual != 0) for p in before), "an ef encode leaves a residual")
    want = {id(p): part.residual.copy() for p, part in zip(a.parameters(), before)}
    # The rebuilt layout: w1 (never encoded) with b1, and w2, b2 in another order.
    c = state.codec_for(FakeBucket(0, [w2, b2]))
    got = residual_of(c, [w2.numel(), b2.numel()])
    check(np.array_equal(got[0].residual, want[id(w2)]) and np.array_equal(got[1].residual, want[id(b2)]),
          "a rebuilt bucket starts from its parameters' residuals, in its own order")
    d = state.codec_for(FakeBucket(1, [b1, w1]))
    got = residual_of(d, [b1.numel(), w1.numel()])
    check(np.array_equal(got[0].residual, want[id(b1)]), "b1's residual moves to its new bucket")
    check(not np.any(got[1].residual), "a parameter never encoded starts from zeros")
    # state_dict by name, and back.
    sd = state.state_dict()
    check(sorted(sd["residual"]) == ["0.bias", "0.weight", "1.bias", "1.weight"], "state_dict names every parameter")
    check(np.array_equal(sd["residual"]["1.weight"].numpy(), want[id(w2)]), "state_dict holds the residual")
    fresh = tgt.TernGradState(spec=EF, module=model)
    fresh.load_state_dict(sd)
    e = fresh.codec_for(FakeBucket(3, [w2, b1]))
    got = residual_of(e, [w2.numel(), b1.numel()])
    check(np.array_equal(got[0].residual, want[id(w2)]) and np.array_equal(got[1].residual, want[id(b1)]),
          "load_state_dict: the buckets start from the loaded residuals")
    check(fresh.iteration == state.iteration and fresh.seed == state.seed, "load_state_dict restores iteration and seed")


def expect_value_error(fn, words, what):
    try:
        fn()
        check(False, "%s: accepted" % what)
    except ValueError as e:
        check(words in str(e), "%s: message %r names %r" % (what, str(e), words))


def test_bad_state_dicts_are_refused_before_anything_changes():
    model = torch.nn.Linear(4, 3)
    state = tgt.TernGradState(spec=EF, module=model)
    encode_once(state, FakeBucket(0, list(model.parameters())))
    good = state.state_dict()
    before = state.state_dict()
    bad = dict(good, spec="ef(terngrad)")
    expect_value_error(lambda: state.load_state_dict(bad), "saved with spec", "another spec")
    bad = dict(good, residual={"nope": torch.zeros(3)}, momentum={})
    expect_value_error(lambda: state.load_state_dict(bad), "'nope'", "an unknown parameter")
    bad = dict(good, residual={"bias": torch.zeros(7)}, momentum={})
    expect_value_error(lambda: state.load_state_dict(bad), "7 elements", "a residual of the wrong size")
    expect_value_error(lambda: state.load_state_dict({"spec": EF}), "not a", "not a state dict")
    expect_value_error(lambda: state.load_state_dict({"format": good["format"], "spec": EF}), "lacks seed",
                       "a state dict without its fields")
    expect_value_error(lambda: state.load_state_dict(dict(good, seed=-1)), "seed -1", "a negative seed")
    after = state.state_dict()
    check(all(torch.equal(before["residual"][k], after["residual"][k]) for k in before["residual"]),
          "a refused load changes nothing")
    expect_value_error(lambda: tgt.TernGradState(spec=EF).state_dict(), "module=", "state_dict without module")


def test_reshard_keeps_the_total_error():
    rng = np.random.default_rng(3)
    ranks = [{"w": ef_state.ParamState(rng.standard_normal(6).astype(np.float32))} for _ in range(4)]
    total = sum(r["w"].residual for r in ranks) / 4
    for new in (1, 2, 3, 4, 8):
        out = ef_state.reshard(ranks, new)
        got = sum(r["w"].residual for r in out) / new
        check(len(out) == new and np.allclose(got, total, atol=1e-6), "reshard 4 -> %d keeps sum/ranks" % new)
    sds = []
    for r in ranks:
        sds.append({"format": "terngrad.TernGradState/1", "spec": EF, "seed": 1, "iteration": 9,
                    "residual": {"w": torch.from_numpy(r["w"].residual)}, "momentum": {}})
    two = tgt.reshard_state_dicts(sds, 2)
    check(len(two) == 2 and two[0]["iteration"] == 9, "reshard_state_dicts keeps the iteration")
    check(np.allclose((two[0]["residual"]["w"] + two[1]["residual"]["w"]).numpy() / 2, total, atol=1e-6),
          "reshard_state_dicts keeps the total error")


# ---------------------------------------------------------------- real DDP
WORLD, STEPS, STOP = 2, 6, 3


def make_model(big):
    """big: 2.9 MB of parameters; DDP's first bucket holds at most 1 MiB, so
    with 1 MB buckets there are several, and the rebuild after the first
    iteration regroups them. Otherwise 0.2 MB: one bucket, whatever DDP
    does, so that a resumed run meets the buckets the uninterrupted one had
    (with clip=0 and nearest rounding a bucket's codes depend only on its
    elements, not their order)."""
    torch.manual_seed(0)
    hidden = (1024, 640) if big else (256, 128)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden[0]), torch.nn.ReLU(), torch.nn.Linear(*hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden[1], 10))


class LayoutRecordingState(tgt.TernGradState):
    """Records every bucket layout the hook asks for."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.layouts = set()

    def codec_for(self, bucket):
        self.layouts.add(tuple(id(p) for p in bucket.parameters()))
        return super().codec_for(bucket)


def batches(rank):
    gen = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(32, 64, generator=gen), torch.randint(0, 10, (32,), generator=gen)) for _ in range(STEPS)]


def train(rank, big, ckpt_in=None, ckpt_out=None):
    """Steps [first, STEPS) of the run (from ckpt_in's step; up to STOP with
    ckpt_out); returns the parameters and the number of bucket layouts seen."""
    model = make_model(big)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    state = LayoutRecordingState(spec=EF, seed=7, module=model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    first = 0
    if ckpt_in is not None:
        saved = torch.load(ckpt_in)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state.load_state_dict(saved["hook"])
        first = saved["step"]
    ddp.register_comm_hook(state, tgt.terngrad_hook)
    data = batches(rank)
    for step in range(first, STEPS):
        x, y = data[step]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
        if ckpt_out is not None and step + 1 == STOP:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "hook": state.state_dict(),
                        "step": step + 1}, ckpt_out)
            return None, len(state.layouts)
    return [p.detach().clone() for p in model.parameters()], len(state.layouts)


def worker(rank, tmp):
    dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "init"), rank=rank, world_size=WORLD)
    try:
        big, layouts = train(rank, True)
        ckpt = os.path.join(tmp, "ckpt%d.pt" % rank)
        whole, _ = train(rank, False)
        train(rank, False, ckpt_out=ckpt)
        resumed, _ = train(rank, False, ckpt_in=ckpt)
        torch.save({"big": big, "layouts": layouts, "whole": whole, "resumed": resumed},
                   os.path.join(tmp, "out%d.pt" % rank))
    finally:
        dist.destroy_process_group()


def test_ddp_rebuild_and_resume():
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(tmp,), nprocs=WORLD, join=True)
        outs = [torch.load(os.path.join(tmp, "out%d.pt" % r)) for r in range(WORLD)]
    big, whole, resumed = outs[0]["big"], outs[0]["whole"], outs[0]["resumed"]
    check(outs[0]["layouts"] >= 3, "DDP's buckets, before and after its rebuild, make several layouts (%d)" %
          outs[0]["layouts"])
    check(all(torch.isfinite(p).all() for p in big), "training through the rebuild stays finite")
    check(all(torch.equal(a, b) for a, b in zip(big, outs[1]["big"])), "replicas stay bit-identical")
    same = all(torch.equal(a, b) for a, b in zip(whole, resumed))
    check(same, "a run resumed from state_dict() at step %d equals the uninterrupted one" % STOP)


def main():
    test_rebuild_carries_residuals()
    test_bad_state_dicts_are_refused_before_anything_changes()
    test_reshard_keeps_the_total_error()
    test_ddp_rebuild_and_resume()
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
