"""Compress or not, per DDP bucket: the "auto" codec choice of the DDP hooks
(TernGradState(spec="auto")), with a model of DDP's own collectives.

tg-train's choice (comm/codec_choice.h, terngrad.choose_codecs) models a
parameter-server step. A DDP bucket instead travels by one of these, per
rank and direction of its link (W ranks, n elements, link rate B bytes/s):

  fp32   ring all-reduce           2 (W-1)/W * 4n bytes
  fp16   ring all-reduce of halves 2 (W-1)/W * 2n bytes, plus two casts
  TernGrad (the compressed candidate; terngrad_auto_hook's variant):
    reduce-scatter (W >= reduce_scatter_from): (W-1)/W * (n/4 + 40 W) bytes
           of slices, then (W-1)/W * n * bit_width(2W)/8 of packed sums
    all-gather: (W-1) * (n/4 + 40) bytes
         plus its encode, sum and decode, as timed on this machine

each step of each collective also paying the link's latency (and the
compressed candidate first all-reduces its scale). The bucket takes the
candidate of least estimated time. The first candidate (fp32) stays unless
another is 5% faster, as in tg-train. Costs are measured once per state on
1M elements; the link rate is given (link_rate="1gbit") or measured by
timing an all-reduce of 8 MiB on the group. Rank 0 decides and broadcasts
its choice, so every rank runs the same collectives. Every recheck_steps
steps the link is timed again; a rate more than REVISIT_FACTOR from the
decided one has every bucket decided again (TernGradState).
"""
import re
import time

import numpy as np

from .codec import Codec

SAMPLE = 1 << 20          # elements the compute costs are timed on
PROBE_BYTES = 8 << 20     # the all-reduce that measures the link
LATENCY_S = 50e-6         # per collective step, when the link's own is not measured
KEEP_FIRST = 0.95         # another candidate must beat the first by 5%
REVISIT_FACTOR = 2.0      # a recheck's link rate this far from the decided one revisits the choice

_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
          "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def parse_rate(text):
    """Bytes per second of a tc-style rate ("100mbit", "1gbit", "10gbit",
    "125mbps" = bytes); ValueError naming the text otherwise."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]+)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS or float(m.group(1)) <= 0:
        raise ValueError("link_rate %r is not a rate (a number and one of %s)" % (text, ", ".join(_UNITS)))
    return float(m.group(1)) * _UNITS[m.group(2).lower()] / 8


def bit_width(v):
    return int(v).bit_length()


class Costs:
    """Seconds per element of each candidate's computation on this machine."""

    def __init__(self, candidates, world):
        rng = np.random.default_rng(0)
        g = (rng.standard_normal(SAMPLE) * 1e-3).astype(np.float32)
        self.per_element = {}
        for spec in candidates:
            if spec == "fp32":
                self.per_element[spec] = 0.0
            elif spec == "fp16":
                self.per_element[spec] = _best(lambda: g.astype(np.float16).astype(np.float32)) / SAMPLE
            else:
                self.per_element[spec] = _codec_seconds(spec, g, world) / SAMPLE


def _best(f, reps=3):
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def _codec_seconds(spec, g, world):
    """Encode of the bucket, the sum of W slices' payloads, and the decode of
    the whole: what a rank computes for one bucket."""
    codec, slicer = Codec(spec), Codec(spec)  # an ef() codec's residual is sized by its first gradient
    try:
        shared = codec.local_scale(g) if codec.wants_shared_scale else None
        payload = codec.encode(g, seed=1, shared_scale=shared)
        m = (g.size // world) // 4 * 4
        piece_scale = slicer.local_scale(g[:m]) if slicer.wants_shared_scale else None  # the slice's own
        piece = slicer.encode(g[:m], seed=2, shared_scale=piece_scale)
        out = np.zeros(g.size, np.float32)

        def once():
            own = codec.local_scale(g) if codec.wants_shared_scale else None
            codec.encode(g, seed=1, shared_scale=own)
            codec.aggregate([piece] * world, m)
            codec.decode_accumulate(payload, out)
        return _best(once)
    finally:
        codec.close()
        slicer.close()


def comm_seconds(spec, n, world, rate, reduce_scatter_from=4, latency_s=LATENCY_S):
    """The model's communication time of one bucket (see the module doc):
    bytes over the rate, plus the latency of each step of each collective
    (a ring all-reduce takes 2 (W-1) steps, an all-to-all or an all-gather
    W-1; the compressed candidate first all-reduces its 4-byte scale)."""
    w = world
    if spec == "fp32":
        return 2 * (w - 1) / w * 4 * n / rate + 2 * (w - 1) * latency_s
    if spec == "fp16":
        return 2 * (w - 1) / w * 2 * n / rate + 2 * (w - 1) * latency_s
    scale_steps = 2 * (w - 1)
    if w >= reduce_scatter_from:
        slices = (w - 1) / w * (n / 4 + 40 * w)
        sums = (w - 1) / w * (n * bit_width(2 * w) / 8 + 40 * w)
        return (slices + sums + 4) / rate + (scale_steps + 2 * (w - 1)) * latency_s
    return ((w - 1) * (n / 4 + 40) + 4) / rate + (scale_steps + (w - 1)) * latency_s


def choose(candidates, n, world, rate, costs, reduce_scatter_from=4):
    """(index of the chosen candidate, {spec: estimated seconds})."""
    est = {c: comm_seconds(c, n, world, rate, reduce_scatter_from) + costs.per_element[c] * n for c in candidates}
    best = min(range(len(candidates)), key=lambda i: est[candidates[i]])
    if best != 0 and est[candidates[best]] > KEEP_FIRST * est[candidates[0]]:
        best = 0
    return best, est
