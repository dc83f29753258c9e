"""terngrad.torch.terngrad_hook in real DDP training: 2 processes, gloo.

For every bucket the hook reduced, its output must equal a float64 NumPy
reference built from the hook's documented recipe: scales max-reduced over
workers, each worker's payload encoded with seed (seed << 16) | rank,
step = iteration and tensor_id = bucket index, then decoded from the bytes
(FORMAT.md), summed and averaged. Also: replicas stay bit-identical, and the
bytes handed to the collectives are 4 + payload_bytes(n) per bucket, about
16x below the default all-reduce's 4n. A variable-size codec (a pure-Python
stand-in: libterngrad ships none yet) gives each worker a payload of its own
length: the hook still averages every worker's decoding, and counts the
lengths and the padded payloads it hands over. Exits 77 (ctest SKIP)
without torch.
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
from reference import reference_decode, reference_scale

WORLD, STEPS, SEED, CLIP = 2, 3, 5, 2.5


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))


def run(rank, state, hook, record):
    """STEPS steps of DDP on this rank's own data; returns the model."""
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    model.register_comm_hook(state, recording_hook(hook, record))
    train_random(model, rank, STEPS, 32)
    return model


THRESHOLD = 0.01


class SparseStandInCodec:
    """A variable-size codec in Python: the int32 indices, then the float32
    values, of the elements above THRESHOLD in magnitude."""
    wants_shared_scale = False
    variable_size = True

    def encode(self, grad, **_):
        idx = torch.nonzero(grad.abs() > THRESHOLD).reshape(-1)
        return torch.cat([idx.to(torch.int32).view(torch.uint8), grad[idx].contiguous().view(torch.uint8)])

    def decode_accumulate(self, payload, grad, **_):
        k = payload.numel() // 8
        grad[payload[:4 * k].clone().view(torch.int32).long()] += payload[4 * k:].clone().view(torch.float32)
        return grad


class StandInState(tgt.TernGradState):
    def codec_for(self, bucket):
        return SparseStandInCodec()


def check_variable_size(rank):
    """The hook with SparseStandInCodec: outputs and bytes (module doc)."""
    state = StandInState(spec="fp32")
    record = []
    model = run(rank, state, tgt.terngrad_hook, record)
    expected_bytes, uneven = 0, 0
    for _, _, grad_in, grad_out in record:
        inputs = gather(grad_in)
        want = torch.zeros_like(grad_in)
        lengths = []
        for g in inputs:
            keep = g.abs() > THRESHOLD
            want[keep] += g[keep]
            lengths.append(8 * int(keep.sum()))
        want.div_(WORLD)
        assert torch.equal(grad_out, want), "variable-size: hook output differs in %d elements" % int(
            (grad_out != want).sum())
        expected_bytes += 8 + max(lengths)
        uneven += len(set(lengths)) > 1
    assert uneven > 0, "every bucket's payloads had one length: the test shows nothing"
    assert state.bytes_sent == expected_bytes, (state.bytes_sent, expected_bytes)
    del model


def gather(t):
    out = [torch.empty_like(t) for _ in range(WORLD)]
    dist.all_gather(out, t)
    return out


def worker(rank, init_file):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=WORLD)
    state = tgt.TernGradState(spec="terngrad:clip=%g" % CLIP, seed=SEED)
    record = []
    model = run(rank, state, tgt.terngrad_hook, record)
    assert len(record) >= STEPS and all(len(e) == 4 for e in record), len(record)

    codec = terngrad.Codec("terngrad:clip=%g" % CLIP)
    expected_bytes = 0
    for index, step, grad_in, grad_out in record:
        inputs = [g.numpy() for g in gather(grad_in)]  # every worker's bucket, as the hook saw it
        scales = [codec.local_scale(g) for g in inputs]
        for g, s in zip(inputs, scales):
            assert abs(s - reference_scale(g, CLIP)) <= 1e-6 * s, (s, reference_scale(g, CLIP))
        shared = np.float32(max(scales))
        total = np.zeros(grad_in.numel(), np.float64)
        for w, g in enumerate(inputs):
            payload = codec.encode(g, tensor_id=index, step=step, seed=(SEED << 16) | w,
                                   shared_scale=float(shared))
            values, scale = reference_decode(payload)
            assert scale == shared, (scale, shared)
            total += values
        want = (total / WORLD).astype(np.float32)
        assert np.array_equal(grad_out.numpy(), want), \
            "bucket %d step %d: hook output differs from the float64 reference in %d of %d elements" % (
                index, step, int(np.sum(grad_out.numpy() != want)), want.size)
        assert np.count_nonzero(want) > 0
        expected_bytes += 4 + codec.payload_bytes(grad_in.numel())
    assert state.iteration == STEPS, state.iteration
    assert state.bytes_sent == expected_bytes, (state.bytes_sent, expected_bytes)

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copies = gather(flat)
    assert torch.equal(copies[0], copies[1]), "replicas diverged"

    baseline = tgt.AllReduceState()
    run(rank, baseline, tgt.allreduce_hook, [])
    ratio = baseline.bytes_sent / state.bytes_sent
    n = sum(p.numel() for p in model.parameters())
    assert baseline.bytes_sent == STEPS * 4 * n, (baseline.bytes_sent, n)
    assert 15.0 < ratio <= 16.0, ratio
    if rank == 0:
        print("ddp hook: %d buckets over %d steps match the float64 reference; %d parameters, "
              "%.0f vs %.0f bytes/step (%.2fx)" % (len(record), STEPS, n, baseline.bytes_per_step(),
                                                   state.bytes_per_step(), ratio))
    check_variable_size(rank)
    # A DDP module outliving its process group can hang in its destructor
    # (torch 1.13, gloo): release it while the group is alive, then part together.
    del model
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(os.path.join(tmp, "init"),), nprocs=WORLD)
    print("test_ddp_hook: passed")
