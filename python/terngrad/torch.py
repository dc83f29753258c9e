"""PyTorch DistributedDataParallel communication hooks: TernGrad, and a
byte-counting copy of PyTorch's default all-reduce to compare it with.

    import terngrad.torch as tgt
    state = tgt.TernGradState(seed=0)
    ddp_model.register_comm_hook(state, tgt.terngrad_hook)
    # or tgt.terngrad_auto_hook: the all-gather or the reduce-scatter
    # variant (terngrad_reduce_scatter_hook) by world size (auto_variant)

What terngrad_hook does with each gradient bucket (a flat float32 tensor;
a float16 or bfloat16 bucket is encoded as it is, the encoders reading its
halves with the bytes of their float32 values (on CUDA terngrad's; the
others through a float32 working copy), and gets the result back in its
dtype; a CUDA bucket is encoded
and decoded on its device, with the same bytes as on the CPU, and its
collectives get CUDA tensors, as NCCL needs):
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

State that survives what DDP does. DDP rebuilds its buckets after the first
iteration (in the order the gradients became ready), so a bucket index does
not name the same parameters for the whole run. The state keeps one codec
per bucket *layout* (the tuple of parameters a bucket holds); when a bucket
with a new layout arrives, the codecs of the buckets that held any of its
parameters hand their ef(...) residuals over, cut by parameter
(terngrad.ef_state), and the new bucket's codec starts from its parameters'
residuals. state_dict() / load_state_dict() save and restore them by
parameter name (pass module= to TernGradState), with the iteration, so a
resumed run continues its error feedback; reshard_state_dicts() maps the
per-rank dicts of a run to another world size, keeping the total error.

Both hooks count what they hand to the collectives in state.bytes_sent
(per worker; the all-gather's input, not the world_size-times larger output):
the default hook passes 4 bytes per element to all_reduce, TernGrad 2 bits
per element plus the 40-byte header and the 4-byte scale per bucket; a
variable-size codec its 8-byte length plus the longest payload (padding
included) per bucket.
"""
import concurrent.futures
import time

import numpy as np
import torch
import torch.distributed as dist

from . import ddp_choice, ef_state
from .choice import auto_candidates
from .codec import Codec

_STATE_FORMAT = "terngrad.TernGradState/1"


class _CountingState:
    def __init__(self, process_group):
        self.process_group = process_group
        self.iteration = 0      # completed backward passes
        self.bytes_sent = 0     # bytes passed to collectives by this worker
        self.bytes_received = 0  # payload bytes from other workers (the hooks that count them)
        self.collective_calls = 0

    def _group(self):
        return self.process_group if self.process_group is not None else dist.group.WORLD

    def _count(self, tensor):
        self.bytes_sent += tensor.numel() * tensor.element_size()
        self.collective_calls += 1

    def _end_bucket(self, bucket):
        if bucket.is_last():
            self.iteration += 1

    def _worker(self):
        """in_background()'s one thread: buckets in the order handed over."""
        if getattr(self, "_executor", None) is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="terngrad-hook")
        return self._executor

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
    world = dist.get_world_size(group)
    tensor.div_(world)
    state._count(tensor)
    # A ring all-reduce receives 2 (W-1)/W of the tensor (what gloo and NCCL run for large ones).
    state.bytes_received += 2 * (world - 1) * tensor.numel() * tensor.element_size() // world
    fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()
    state._end_bucket(bucket)
    return fut.then(lambda f: f.value()[0])


class TernGradState(_CountingState):
    """State of terngrad_hook.

    spec: the codec ("terngrad" = clip 2.5 with scale sharing; any spec of
    terngrad.Codec works, e.g. "fp16" or "ef(terngrad:round=nearest)").
    seed: the run's seed, below 2^48. process_group: None for the default
    group. module: the model (the DDP module or the one it wraps), whose
    parameter names state_dict() and load_state_dict() use.
    reduce_scatter_from: the world size from which terngrad_auto_hook takes
    the reduce-scatter variant (auto_variant).
    spec="auto" or "auto(<spec>,...)" (terngrad_auto_hook): each bucket
    layout travels as fp32, fp16 or ef(terngrad:round=nearest) (or the
    named candidates), whichever terngrad.ddp_choice's model of DDP's
    collectives says is fastest for its size on this link; link_rate ("1gbit",
    or bytes/s) gives the link, else it is measured on the group at the
    first decision. Rank 0 decides and broadcasts; state.choices lists each
    decision. A layout that goes fp32 or fp16 first sends the error-feedback
    residuals its parameters still owe (added to its gradient).
    recheck_steps (auto only; 0: never): every that many steps the link is
    measured again on the group (an all-reduce of 8 MiB, at the first bucket
    of the step, on every rank); when rank 0 finds it moved by more than 2x
    from the rate of the last decisions (a job moved, a link degraded), every
    layout is decided again at its next bucket with the new rate
    (state.revisits lists each check that did so). A layout whose codec
    changes carries its residuals over (into another ef codec) or sends them
    (fp32, fp16), as a new layout does.
    """

    def __init__(self, process_group=None, spec="terngrad", seed=0, module=None, reduce_scatter_from=4,
                 link_rate=None, recheck_steps=1000):
        super().__init__(process_group)
        if not 0 <= seed < (1 << 48):
            raise ValueError("seed must be in [0, 2^48), got %d" % seed)
        if reduce_scatter_from < 2:
            raise ValueError("reduce_scatter_from must be at least 2 ranks, got %d" % reduce_scatter_from)
        self.reduce_scatter_from = reduce_scatter_from
        self.spec = spec
        self.seed = seed
        self.module = module
        # One codec per bucket layout (tuple of id(parameter)): terngrad keeps a
        # bucket's statistics between local_scale() and encode(), ef(...) its
        # residual, and a bucket's decode runs in its future.
        self._codecs = {}
        self._sizes = {}    # layout -> the parameters' element counts
        self._pending = {}  # id(parameter) -> ef_state.ParamState, not yet in a bucket's codec
        self.auto = spec.startswith("auto")
        if self.auto:
            # Checked here (an unknown candidate, one an all-reduce cannot
            # take), not inside backward(); the worker-side half of each, as
            # in async runs (a DDP rank keeps no server state).
            self.candidates = auto_candidates(spec, sync=False)
            self.link_rate = None if link_rate is None else (
                float(link_rate) if isinstance(link_rate, (int, float)) else ddp_choice.parse_rate(link_rate))
            self.choices = []   # one dict per decision: elements, chosen spec, estimates
            self._chosen = {}   # layout -> spec
            self._costs = None
            if not isinstance(recheck_steps, int) or recheck_steps < 0:
                raise ValueError("recheck_steps must be a whole number of steps >= 0, got %r" % (recheck_steps,))
            self.recheck_steps = recheck_steps
            self.revisits = []         # one dict per recheck that moved the decisions
            self._decided_rate = None  # the link rate the current decisions were made for
            self._rechecked_at = 0     # the iteration of the last recheck
            self._revisited = {}       # layout -> its spec before the last revisit, until decided again
        else:
            if link_rate is not None:
                raise ValueError("link_rate is for spec=\"auto\" (this state's spec is %r)" % spec)
            Codec(spec).close()  # a bad spec fails here, not inside backward()

    def _layout_of(self, bucket):
        params = bucket.parameters()
        layout = tuple(id(p) for p in params)
        sizes = [p.numel() for p in params]
        if sum(sizes) != bucket.buffer().numel():
            raise ValueError("terngrad_hook: bucket %d holds %d elements, its %d parameters %d" %
                             (bucket.index(), bucket.buffer().numel(), len(sizes), sum(sizes)))
        return layout, sizes

    def _release_overlapping(self, layout):
        wanted = set(layout)
        for old in [k for k in self._codecs if wanted.intersection(k)]:
            self._release(old)

    def codec_for(self, bucket):
        """The codec of this bucket's layout; a new layout takes over the
        residuals of its parameters (see the module doc)."""
        layout, sizes = self._layout_of(bucket)
        codec = self._codecs.get(layout)
        if codec is not None:
            return codec
        self._release_overlapping(layout)
        codec = Codec(self.spec_for(bucket) if self.auto else self.spec)
        parts = [self._pending.pop(k, None) for k in layout]
        if any(part is not None for part in parts):
            momentum = any(part is not None and part.momentum is not None for part in parts)
            zeros = lambda n: ef_state.ParamState(np.zeros(n, np.float32), np.zeros(n, np.float32) if momentum else None)
            codec.load_state(ef_state.join([part if part is not None else zeros(n) for part, n in zip(parts, sizes)]))
        self._codecs[layout] = codec
        self._sizes[layout] = sizes
        return codec

    def spec_for(self, bucket):
        """spec="auto": the spec this bucket's layout travels with, decided at
        its first bucket (a collective on the group: every rank calls it for
        the same bucket, as every hook does)."""
        layout, sizes = self._layout_of(bucket)
        if (self.recheck_steps and self.iteration > self._rechecked_at and
                self.iteration % self.recheck_steps == 0):  # the first bucket of such a step
            self._rechecked_at = self.iteration
            self._recheck(bucket)
        spec = self._chosen.get(layout)
        if spec is not None:
            return spec
        group = self._group()
        world = dist.get_world_size(group)
        buffer = bucket.buffer()
        if self.link_rate is None:
            self.link_rate = _measure_link(group, world, buffer.device)
        self._decided_rate = self.link_rate
        # A CUDA bucket: the candidates its device can encode (all-reduces always).
        def on_device(spec):
            with Codec(spec) as c:
                return c.device_takes(buffer.dtype)
        candidates = [c for c in self.candidates if c in ("fp32", "fp16") or not buffer.is_cuda or on_device(c)]
        choice = torch.zeros(1, dtype=torch.int64, device=buffer.device)
        n = sum(sizes)
        estimates = None
        if dist.get_rank(group) == 0:
            if self._costs is None:
                self._costs = ddp_choice.Costs(self.candidates, world)
            best, estimates = ddp_choice.choose(candidates, n, world, self.link_rate, self._costs,
                                                self.reduce_scatter_from)
            choice[0] = best
        dist.broadcast(choice, 0, group=group)
        spec = candidates[int(choice.item())]
        if layout in self._codecs and self._revisited.pop(layout, spec) != spec:
            self._release(layout)  # its residuals go to the next codec, or are sent (flush_residuals)
        self._chosen[layout] = spec
        self.choices.append({"bucket": bucket.index(), "elements": n, "spec": spec, "world": world,
                             "link_bytes_per_s": self.link_rate, "estimated_s": estimates})
        return spec

    def _recheck(self, bucket):
        """Measures the link again (a collective: every rank is at the same
        bucket of the same step); rank 0 compares it with the rate of the
        current decisions and broadcasts its rate and verdict. Past 2x either
        way, every layout is decided again at its next bucket."""
        group = self._group()
        world = dist.get_world_size(group)
        device = bucket.buffer().device
        measured = _measure_link(group, world, device)
        verdict = torch.zeros(2, dtype=torch.float64, device=device)
        if dist.get_rank(group) == 0:
            old = self._decided_rate or measured
            verdict[0] = measured
            verdict[1] = 1.0 if max(measured / old, old / measured) > ddp_choice.REVISIT_FACTOR else 0.0
        dist.broadcast(verdict, 0, group=group)
        rate, revisit = float(verdict[0].item()), bool(verdict[1].item())
        if revisit:
            self.revisits.append({"step": self.iteration, "from_bytes_per_s": self._decided_rate,
                                  "to_bytes_per_s": rate, "layouts": len(self._chosen)})
            self.link_rate = rate
            self._revisited.update(self._chosen)  # what each layout ran until now
            self._chosen.clear()  # each layout decides again at its next bucket

    def flush_residuals(self, bucket):
        """The error-feedback residuals this bucket's parameters still owe
        (their earlier layouts' codecs released), as one float32 tensor of
        the bucket's size, or None; they are no longer kept."""
        layout, sizes = self._layout_of(bucket)
        self._release_overlapping(layout)
        parts = [self._pending.pop(k, None) for k in layout]
        if all(part is None for part in parts):
            return None
        return torch.from_numpy(np.concatenate(
            [part.residual if part is not None else np.zeros(n, np.float32) for part, n in zip(parts, sizes)]))

    def _parts(self, layout):
        """The ef(...) residuals of a layout's codec by parameter, or None
        (no ef state: nothing encoded yet, or a codec without one)."""
        blob = self._codecs[layout].state()
        if blob[:4] != b"TGEF":
            return None  # stateless, or a state that is not cut by parameter (powersgd's Q)
        return ef_state.split(blob, self._sizes[layout])

    def _release(self, layout):
        parts = self._parts(layout)
        if parts is not None:
            self._pending.update(zip(layout, parts))
        self._codecs.pop(layout).close()
        del self._sizes[layout]

    def worker_seed(self, rank):
        if not 0 <= rank < (1 << 16):
            raise ValueError("rank must be in [0, 65536), got %d" % rank)
        return (self.seed << 16) | rank

    def _names(self):
        if self.module is None:
            raise ValueError("TernGradState: pass module= (the model) to save or load state by parameter name")
        return {id(p): name for name, p in self.module.named_parameters()}

    def state_dict(self):
        """The spec, seed, iteration and every parameter's ef(...) residual
        (and momentum), by parameter name: torch.save()-able."""
        names = self._names()
        parts = dict(self._pending)
        for layout in self._codecs:
            got = self._parts(layout)
            if got is not None:
                parts.update(zip(layout, got))
        unknown = [k for k in parts if k not in names]
        if unknown:
            raise ValueError("TernGradState.state_dict: %d residual(s) belong to parameters that are not "
                             "module's" % len(unknown))
        return {"format": _STATE_FORMAT, "spec": self.spec, "seed": self.seed, "iteration": self.iteration,
                "residual": {names[k]: torch.from_numpy(p.residual.copy()) for k, p in parts.items()},
                "momentum": {names[k]: torch.from_numpy(p.momentum.copy())
                             for k, p in parts.items() if p.momentum is not None}}

    def load_state_dict(self, state):
        """Restores a state_dict() (of this rank, or one of
        reshard_state_dicts()'s). Every field is checked before anything
        changes; the buckets' codecs start from the loaded residuals."""
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise ValueError("TernGradState.load_state_dict: not a %s dict" % _STATE_FORMAT)
        missing = [k for k in ("spec", "seed", "iteration", "residual", "momentum") if k not in state]
        if missing:
            raise ValueError("TernGradState.load_state_dict: the dict lacks %s" % ", ".join(missing))
        if state["spec"] != self.spec:
            raise ValueError("TernGradState.load_state_dict: saved with spec %r, this state has %r" %
                             (state["spec"], self.spec))
        if not 0 <= state["seed"] < (1 << 48) or state["iteration"] < 0:
            raise ValueError("TernGradState.load_state_dict: seed %r or iteration %r out of range" %
                             (state["seed"], state["iteration"]))
        self._names()  # raises, naming module=, without one
        params = dict(self.module.named_parameters())
        pending = {}
        for name, residual in state["residual"].items():
            if name not in params:
                raise ValueError("TernGradState.load_state_dict: residual of %r, which module has no "
                                 "parameter of" % name)
            if residual.numel() != params[name].numel():
                raise ValueError("TernGradState.load_state_dict: residual of %r has %d elements, the parameter %d" %
                                 (name, residual.numel(), params[name].numel()))
            momentum = state["momentum"].get(name)
            if momentum is not None and momentum.numel() != residual.numel():
                raise ValueError("TernGradState.load_state_dict: momentum of %r has %d elements, its residual %d" %
                                 (name, momentum.numel(), residual.numel()))
            pending[id(params[name])] = ef_state.ParamState(
                residual.detach().cpu().float().numpy(),
                None if momentum is None else momentum.detach().cpu().float().numpy())
        for layout in list(self._codecs):
            self._codecs.pop(layout).close()
        self._sizes.clear()
        self._pending = pending
        self.seed = state["seed"]
        self.iteration = state["iteration"]


def reshard_state_dicts(state_dicts, world_size):
    """The state_dict() of every rank of a run -> world_size dicts for a run
    with that many ranks: residuals re-sliced by parameter and rescaled so
    that the error still owed, sum(residuals) / ranks, is the same
    (ef_state.reshard). The iteration and spec are kept."""
    if not state_dicts:
        raise ValueError("reshard_state_dicts: no state dicts")
    first = state_dicts[0]
    for i, sd in enumerate(state_dicts):
        if sd.get("format") != _STATE_FORMAT or sd["spec"] != first["spec"]:
            raise ValueError("reshard_state_dicts: dict %d is not a %s dict of spec %r" % (i, _STATE_FORMAT, first["spec"]))
    ranks = [{name: ef_state.ParamState(r.numpy(), sd["momentum"][name].numpy() if name in sd["momentum"] else None)
              for name, r in sd["residual"].items()} for sd in state_dicts]
    out = []
    for parts in ef_state.reshard(ranks, world_size):
        out.append({"format": _STATE_FORMAT, "spec": first["spec"], "seed": first["seed"],
                    "iteration": first["iteration"],
                    "residual": {k: torch.from_numpy(p.residual) for k, p in parts.items()},
                    "momentum": {k: torch.from_numpy(p.momentum) for k, p in parts.items() if p.momentum is not None}})
    return out


_SIXTEEN_BIT = (torch.float16, torch.bfloat16)


def _begin_bucket(state, bucket, hook):
    """What both TernGrad hooks start with: the gradient to encode, a
    float32 tensor for the result, the bucket's codec, and the shared scale
    (all_reduce MAX; None for codecs without one). Returns (group, buffer,
    grad, out, codec, shared). A 16-bit CPU bucket (AMP, bf16 training) is
    encoded as it is (the encoders read float16 and bfloat16: the bytes of
    its float32 values) and the result, summed in float32, goes back in its
    dtype (_to_bucket); so is a CUDA one where the codec's device encoder
    reads halves (terngrad's, Codec.device_takes), else it goes through a
    float32 working copy. Any other dtype is refused before a collective
    starts."""
    group = state._group()
    buffer = bucket.buffer()
    if buffer.dtype not in (torch.float32,) + _SIXTEEN_BIT:
        raise TypeError("%s: bucket %d holds %s gradients; TernGrad takes float32, float16 and bfloat16" %
                        (hook, bucket.index(), buffer.dtype))
    codec = state.codec_for(bucket)
    if buffer.dtype == torch.float32:
        grad = out = buffer
    elif buffer.is_cuda and not codec.device_takes(buffer.dtype):
        grad = out = buffer.float()
    else:
        grad, out = buffer, torch.empty(buffer.numel(), dtype=torch.float32, device=buffer.device)
    shared = None
    if codec.wants_shared_scale:
        # On the bucket's device: NCCL reduces CUDA tensors only.
        scale = torch.tensor([codec.local_scale(grad)], dtype=torch.float32, device=grad.device)
        state._count(scale)
        dist.all_reduce(scale, op=dist.ReduceOp.MAX, group=group)
        shared = float(scale.item())
    return group, buffer, grad, out, codec, shared


def _measure_link(group, world, device):
    """The group's link rate in bytes/s per rank and direction, from the
    best of three all-reduces of 8 MiB (after one to warm up): a ring
    all-reduce moves 2 (W-1)/W of the tensor each way."""
    probe = torch.zeros(ddp_choice.PROBE_BYTES // 4, dtype=torch.float32, device=device)
    dist.all_reduce(probe, group=group)
    best = float("inf")
    for _ in range(3):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        dist.all_reduce(probe, group=group)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * (world - 1) / world * ddp_choice.PROBE_BYTES / best


def _to_bucket(buffer, out):
    """The hook's result in the bucket's dtype (out itself for float32)."""
    if out is buffer:
        return out
    return buffer.copy_(out)


def terngrad_hook(state, bucket):
    """DDP communication hook: TernGrad-compress the bucket (see the module doc)."""
    group, buffer, grad, out, codec, shared = _begin_bucket(state, bucket, "terngrad_hook")
    world = dist.get_world_size(group)
    payload = codec.encode(grad, tensor_id=bucket.index(), step=state.iteration,
                           seed=state.worker_seed(dist.get_rank(group)), shared_scale=shared)
    gathered, lengths, fut = _all_gather_async(state, group, world, payload, same_size=not codec.variable_size)
    state._end_bucket(bucket)

    def average(_):
        out.zero_()
        for p, length in zip(gathered, lengths):
            codec.decode_accumulate(p[:length], out, check=False)
        if out.is_cuda:
            codec.device_check(out)  # one wait for the bucket's decodes
        return _to_bucket(buffer, out.div_(world))

    return fut.then(average)


def chunk_bounds(n, world):
    """The reduce-scatter's cut of n elements into world slices: begins
    (multiples of 4, as the codecs' slices need) and lengths; the last ones
    may be shorter or empty."""
    step = (n + 4 * world - 1) // (4 * world) * 4
    begins = [j * step if j * step < n else 0 for j in range(world)]  # an empty slice starts at 0
    return begins, [min(n, j * step + step) - j * step if j * step < n else 0 for j in range(world)]


def terngrad_reduce_scatter_hook(state, bucket):
    """DDP communication hook: a compressed all-reduce that keeps TernGrad's
    homomorphic sum, as the parameter server does.

    1. scale sharing as terngrad_hook (all_reduce MAX);
    2. the bucket is cut into W slices (chunk_bounds) and encoded in one
       call, with the whole bucket's statistics (Codec.encode_slices);
    3. all_to_all_single: slice j to rank j (the payloads' lengths first,
       for a variable-size codec);
    4. rank j sums the W payloads of its slice without decoding them
       (Codec.aggregate: integer counts, bit_width(2W) bits per element);
    5. all_gather of the sums, padded to the longest, and every rank
       decodes every slice's sum / W. Their lengths follow from the slices'
       where the codec can tell (Codec.aggregate_bytes: 2-bit terngrad with
       scale sharing, fp32); otherwise they are all-gathered first.
    Received per rank and element: (2 + bit_width(2W)) (W-1)/W bits plus
    headers, against terngrad_hook's 2 (W-1): cheaper from W = 3 on. Every
    rank decodes the same sums, so replicas stay bit-identical. Steps 1-4
    block (the bucket's gradient is final), and with them the lengths'
    all-gather where it is needed; step 5 is the returned future.
    """
    group, buffer, grad, out, codec, shared = _begin_bucket(state, bucket, "terngrad_reduce_scatter_hook")
    if grad.is_cuda and codec.aggregate_bytes(4, 2) is None:
        raise ValueError("terngrad_reduce_scatter_hook: bucket %d is on %s and its codec %s sums on the host only; "
                         "CUDA buckets sum on the device with terngrad and scale sharing (or use terngrad_hook)" %
                         (bucket.index(), grad.device, codec.spec))
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    begins, lengths = chunk_bounds(grad.numel(), world)
    payloads = codec.encode_slices(grad, begins, lengths, tensor_id=bucket.index(), step=state.iteration,
                                   seed=state.worker_seed(rank), shared_scale=shared)
    send_sizes = [p.numel() for p in payloads]
    if codec.variable_size:
        recv_sizes = _exchange_sizes(state, group, world, send_sizes)
    else:
        recv_sizes = [codec.payload_bytes(lengths[rank])] * world
    send = torch.cat(payloads)
    recv = torch.empty(sum(recv_sizes), dtype=torch.uint8, device=send.device)
    state._count(send)
    state.bytes_received += sum(s for j, s in enumerate(recv_sizes) if j != rank)
    dist.all_to_all_single(recv, send, recv_sizes, send_sizes, group=group)
    mine = codec.aggregate(list(torch.split(recv, recv_sizes)), lengths[rank])
    # The sums' sizes differ (the last slices are shorter; entropy-coded
    # sums): known from the slices' lengths where the codec can tell
    # (aggregate_bytes), else all-gathered first.
    known = [codec.aggregate_bytes(m, world) for m in lengths]
    if None in known:
        gathered, all_sizes, fut = _all_gather_async(state, group, world, mine, same_size=False)
    else:
        if mine.numel() != known[rank]:
            raise RuntimeError("terngrad_reduce_scatter_hook: the sum of slice %d has %d bytes, aggregate_bytes "
                               "said %d" % (rank, mine.numel(), known[rank]))
        gathered, all_sizes, fut = _all_gather_known(state, group, mine, known)
    state._end_bucket(bucket)

    def average(_):
        for j in range(world):
            if lengths[j]:
                codec.decode_aggregate(gathered[j][:all_sizes[j]], out[begins[j]:begins[j] + lengths[j]])
        if out.is_cuda:
            codec.device_check(out)  # the sums' bodies, checked as they were unpacked
        return _to_bucket(buffer, out.div_(world))

    return fut.then(average)


def _exchange_sizes(state, group, world, send_sizes):
    """The lengths of the payloads each rank will receive (a variable-size
    codec's): one int64 per pair, by all_to_all_single."""
    send = torch.tensor(send_sizes, dtype=torch.int64)
    recv = torch.empty(world, dtype=torch.int64)
    state._count(send)
    dist.all_to_all_single(recv, send, group=group)
    return [int(v) for v in recv.tolist()]


def _all_gather_async(state, group, world, payload, same_size):
    """The asynchronous all_gather of one payload per rank, padded to the
    longest (after all-gathering the lengths) unless every rank's has the
    same size. Returns (gathered, lengths, future)."""
    lengths = [payload.numel()] * world
    if not same_size:
        payload, lengths = _pad_to_longest(state, group, world, payload)
    gathered = [torch.empty_like(payload) for _ in range(world)]
    state._count(payload)
    state.bytes_received += (world - 1) * payload.numel()
    return gathered, lengths, dist.all_gather(gathered, payload, group=group, async_op=True).get_future()


def _all_gather_known(state, group, payload, sizes):
    """The asynchronous all_gather of one payload per rank whose sizes every
    rank knows (sizes[j]: rank j's): padded to the longest, no lengths
    exchanged. Returns (gathered, sizes, future)."""
    padded = torch.zeros(max(sizes), dtype=torch.uint8, device=payload.device)
    padded[:payload.numel()] = payload
    gathered = [torch.empty_like(padded) for _ in sizes]
    state._count(padded)
    state.bytes_received += (len(sizes) - 1) * padded.numel()
    return gathered, sizes, dist.all_gather(gathered, padded, group=group, async_op=True).get_future()


def _pad_to_longest(state, group, world, payload):
    """A variable-size payload's all-gather: every worker's length (blocking,
    as the scale's all_reduce), and this payload padded with zeros to the
    longest, which all_gather needs. Returns (padded payload, lengths)."""
    length = torch.tensor([payload.numel()], dtype=torch.int64, device=payload.device)
    state._count(length)
    lengths = [torch.empty_like(length) for _ in range(world)]
    dist.all_gather(lengths, length, group=group)
    lengths = [int(t.item()) for t in lengths]
    padded = torch.zeros(max(lengths), dtype=torch.uint8, device=payload.device)
    padded[:payload.numel()] = payload
    return padded, lengths


def in_background(hook):
    """The hook run off the backward pass: its whole work, collectives
    included, on one worker thread of the state, and the returned future
    completed from there, so the backward pass goes on computing the next
    buckets' gradients while a bucket is encoded, exchanged and summed.

        ddp.register_comm_hook(state, tgt.in_background(tgt.terngrad_reduce_scatter_hook))

    The thread takes the buckets in the order DDP hands them over, one at a
    time, so every rank issues the same collectives in the same order, and the
    results are the hook's own, bit for bit (tested). The encoders and the
    collectives release the GIL. CUDA buckets run inline (their work is
    ordered on the caller's stream already)."""
    def background_hook(state, bucket):
        if bucket.buffer().is_cuda:
            return hook(state, bucket)
        fut = torch.futures.Future()

        def job():
            try:
                fut.set_result(hook(state, bucket).wait())
            except BaseException as e:  # handed to whoever waits on the bucket (DDP)
                fut.set_exception(e)

        state._worker().submit(job)
        return fut

    background_hook.__name__ = hook.__name__ + "_in_background"
    background_hook.__doc__ = "%s, run by in_background()." % hook.__name__
    return background_hook


def auto_variant(world, is_cuda, reduce_scatter_from=4, device_sum=True):
    """The hook terngrad_auto_hook runs for a bucket: terngrad_hook (the
    all-gather) below reduce_scatter_from ranks, and for CUDA buckets whose
    codec cannot sum on the device (device_sum: Codec.aggregate_bytes knows
    the sum's length, i.e. 2-bit terngrad with scale sharing);
    terngrad_reduce_scatter_hook from there. The reduce-scatter's device
    path (slices, sums and decoded sums on the GPU, bit for bit the CPU's)
    passed tests/python/test_ddp_cuda.py on an H200 (bench/RESULTS.md,
    2026-11-30, gloo and NCCL).

    Why 4 by default (experiments/results/ddp/): at W = 2 the all-gather is
    faster (it receives fewer bits: 2.0 against 2.5); at W = 4 and 1 Gbit/s
    the reduce-scatter is, once the sums' lengths need no collective of their
    own (aggregate_bytes): 228.7 against 233.7 ms, 4.5 against 6.0 bits; the
    scale model puts it 2.5x ahead at W = 8 and 100 Gbit/s, and the
    all-gather behind fp32's ring all-reduce from W = 32 on. W = 3 was not
    measured. (Measured with CPU buckets; on GPUs the bits on the wire are
    the same.)"""
    if world < reduce_scatter_from or (is_cuda and not device_sum):
        return terngrad_hook
    return terngrad_reduce_scatter_hook


def terngrad_auto_hook(state, bucket):
    """DDP communication hook: terngrad_hook or terngrad_reduce_scatter_hook,
    as auto_variant picks for this group's size and the bucket's device.
    Every rank picks the same (same world size, same device type), so the
    replicas stay bit-identical; a bucket keeps its variant for the run.
    With TernGradState(spec="auto"), each bucket layout first takes the
    codec the state chooses for it (TernGradState, terngrad.ddp_choice): fp32
    and fp16 go by all-reduce (fp32 exactly as PyTorch's default), a
    compressed codec by the variant above."""
    if state.auto:
        spec = state.spec_for(bucket)
        if spec in ("fp32", "fp16"):
            return _dense_all_reduce(state, bucket, spec)
    world = dist.get_world_size(state._group())
    is_cuda = bucket.buffer().is_cuda
    device_sum = not is_cuda or state.codec_for(bucket).aggregate_bytes(4, 2) is not None
    hook = auto_variant(world, is_cuda, state.reduce_scatter_from, device_sum)
    return hook(state, bucket)


def _dense_all_reduce(state, bucket, spec):
    """An auto layout that travels uncompressed: the residuals its
    parameters still owe are added first, then PyTorch's all-reduce of the
    bucket / W (fp16: of its float16 cast, as fp16_compress_hook)."""
    group = state._group()
    world = dist.get_world_size(group)
    buffer = bucket.buffer()
    owed = state.flush_residuals(bucket)
    if owed is not None:
        buffer.add_(owed.to(device=buffer.device, dtype=buffer.dtype))
    if spec == "fp32":  # in the bucket's own dtype, as PyTorch's default
        return allreduce_hook(state, bucket)
    half = buffer.to(torch.float16).div_(world)
    state._count(half)
    state.bytes_received += 2 * (world - 1) * half.numel() * half.element_size() // world
    fut = dist.all_reduce(half, group=group, async_op=True).get_future()
    state._end_bucket(bucket)
    return fut.then(lambda f: buffer.copy_(f.value()[0]))


__all__ = ["AllReduceState", "TernGradState", "allreduce_hook", "auto_variant", "chunk_bounds", "in_background",
           "reshard_state_dicts", "terngrad_auto_hook", "terngrad_hook", "terngrad_reduce_scatter_hook"]
