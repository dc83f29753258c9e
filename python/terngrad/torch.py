"""PyTorch DistributedDataParallel communication hooks: TernGrad, and a
byte-counting copy of PyTorch's default all-reduce to compare it with.

    import terngrad.torch as tgt
    state = tgt.TernGradState(seed=0)
    ddp_model.register_comm_hook(state, tgt.terngrad_hook)

What terngrad_hook does with each gradient bucket (a flat float32 tensor):
  1. scale = codec.local_scale(bucket); all_reduce(scale, MAX): scale sharing,
     4 bytes per bucket (blocking: the bucket's gradients are final already);
  2. payload = codec.encode(bucket, shared_scale=max): 40 + ceil(n/4) bytes;
  3. all_gather of the payloads (every worker's has the same size);
     a variable-size codec's (Codec.variable_size) differ: their lengths
     are all-gathered first (8 bytes each), the payloads padded with zeros
     to the longest, and each worker's decoded with its own length;
  4. bucket = sum of decode(payload_w) / world_size, in the returned Future.
Every worker decodes the same payloads in the same order, so all replicas
get bit-identical averaged gradients (parameters stay in sync).

Randomness (deterministic, reproducible from the state's seed):
  seed      = (state.seed << 16) | rank   (per worker: independent draws)
  step      = state.iteration, the number of completed backward passes
              (incremented after the bucket with is_last())
  tensor_id = bucket.index()
so the same seed, data and world size give the same training run.

Both hooks count what they hand to the collectives in state.bytes_sent
(per worker; the all-gather's input, not the world_size-times larger output):
the default hook passes 4 bytes per element to all_reduce, TernGrad 2 bits
per element plus the 40-byte header and the 4-byte scale per bucket; a
variable-size codec its 8-byte length plus the longest payload (padding
included) per bucket.
"""
import torch
import torch.distributed as dist

from .codec import Codec


class _CountingState:
    def __init__(self, process_group):
        self.process_group = process_group
        self.iteration = 0      # completed backward passes
        self.bytes_sent = 0     # bytes passed to collectives by this worker
        self.collective_calls = 0

    def _group(self):
        return self.process_group if self.process_group is not None else dist.group.WORLD

    def _count(self, tensor):
        self.bytes_sent += tensor.numel() * tensor.element_size()
        self.collective_calls += 1

    def _end_bucket(self, bucket):
        if bucket.is_last():
            self.iteration += 1

    def bytes_per_step(self):
        return self.bytes_sent / max(self.iteration, 1)


class AllReduceState(_CountingState):
    """State of allreduce_hook: the process group (None = WORLD) and counters."""

    def __init__(self, process_group=None):
        super().__init__(process_group)


def allreduce_hook(state, bucket):
    """PyTorch's default behaviour (divide by world size, all_reduce), counting bytes."""
    group = state._group()
    tensor = bucket.buffer()
    tensor.div_(dist.get_world_size(group))
    state._count(tensor)
    fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()
    state._end_bucket(bucket)
    return fut.then(lambda f: f.value()[0])


class TernGradState(_CountingState):
    """State of terngrad_hook.

    spec: the codec ("terngrad" = clip 2.5 with scale sharing; any spec of
    terngrad.Codec works, e.g. "fp16"). seed: the run's seed, below 2^48.
    process_group: None for the default group.
    """

    def __init__(self, process_group=None, spec="terngrad", seed=0):
        super().__init__(process_group)
        if not 0 <= seed < (1 << 48):
            raise ValueError("seed must be in [0, 2^48), got %d" % seed)
        self.spec = spec
        self.seed = seed
        # One codec per bucket: terngrad keeps a bucket's statistics between
        # local_scale() and encode(), and a bucket's decode runs in its future.
        self._codecs = {}
        Codec(spec).close()  # a bad spec fails here, not inside backward()

    def codec(self, bucket_index):
        if bucket_index not in self._codecs:
            self._codecs[bucket_index] = Codec(self.spec)
        return self._codecs[bucket_index]

    def worker_seed(self, rank):
        if not 0 <= rank < (1 << 16):
            raise ValueError("rank must be in [0, 65536), got %d" % rank)
        return (self.seed << 16) | rank


def terngrad_hook(state, bucket):
    """DDP communication hook: TernGrad-compress the bucket (see the module doc)."""
    group = state._group()
    world = dist.get_world_size(group)
    grad = bucket.buffer()
    if grad.dtype != torch.float32:
        raise TypeError("terngrad_hook: bucket %d holds %s gradients; TernGrad takes float32" %
                        (bucket.index(), grad.dtype))
    codec = state.codec(bucket.index())
    shared = None
    if codec.wants_shared_scale:
        scale = torch.tensor([codec.local_scale(grad)], dtype=torch.float32)
        state._count(scale)
        dist.all_reduce(scale, op=dist.ReduceOp.MAX, group=group)
        shared = float(scale.item())
    payload = codec.encode(grad, tensor_id=bucket.index(), step=state.iteration,
                           seed=state.worker_seed(dist.get_rank(group)), shared_scale=shared)
    lengths = [payload.numel()] * world
    if codec.variable_size:
        payload, lengths = _pad_to_longest(state, group, world, payload)
    gathered = [torch.empty_like(payload) for _ in range(world)]
    state._count(payload)
    fut = dist.all_gather(gathered, payload, group=group, async_op=True).get_future()
    state._end_bucket(bucket)

    def average(_):
        grad.zero_()
        for p, length in zip(gathered, lengths):
            codec.decode_accumulate(p[:length], grad)
        return grad.div_(world)

    return fut.then(average)


def _pad_to_longest(state, group, world, payload):
    """A variable-size payload's all-gather: every worker's length (blocking,
    as the scale's all_reduce), and this payload padded with zeros to the
    longest, which all_gather needs. Returns (padded payload, lengths)."""
    length = torch.tensor([payload.numel()], dtype=torch.int64)
    state._count(length)
    lengths = [torch.empty_like(length) for _ in range(world)]
    dist.all_gather(lengths, length, group=group)
    lengths = [int(t.item()) for t in lengths]
    padded = torch.zeros(max(lengths), dtype=torch.uint8)
    padded[:payload.numel()] = payload
    return padded, lengths


__all__ = ["AllReduceState", "TernGradState", "allreduce_hook", "terngrad_hook"]
