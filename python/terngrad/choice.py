"""Compress or not, per variable: the "auto" codec choice of tg-train
(comm/codec_choice.h) for a trainer of your own.

    import terngrad
    specs, seconds = terngrad.choose_codecs([p.numel() for p in model.parameters()],
                                            up_bytes_per_s=125e6, replicas=4)
    codecs = [terngrad.Codec(s) for s in specs]

The choice minimises a step-time model of a parameter-server step: the
busier direction of the ps link (R / P replicas' payloads in, their sums
out), plus each codec's encode, server sum and decode as measured on this
machine during the call, plus two round trips. Without a link (rates 0)
there is nothing to save and the first candidate is every variable's.
"""
import ctypes

from ._native import check, lib


def auto_candidates(spec="auto", sync=True):
    """The canonical specs an "auto" or "auto(<spec>,...)" spec chooses from.
    An unknown or (for sync=False) unusable candidate raises TernGradError
    naming it."""
    size = ctypes.c_size_t(0)
    buf = ctypes.create_string_buffer(4096)
    check(lib.tg_auto_candidates(spec.encode(), int(bool(sync)), buf, len(buf), ctypes.byref(size)))
    return buf.value.decode().splitlines()


def choose_codecs(sizes, up_bytes_per_s, down_bytes_per_s=None, replicas=2, num_ps=1, spec="auto", sync=True,
                  round_trip_s=0.0, fixed=None):
    """(specs, seconds): the codec spec each variable (sizes[i] elements)
    should travel with, and the model's communication and codec time per
    step for that plan. down_bytes_per_s defaults to up_bytes_per_s; fixed[i]
    true keeps variable i fp32."""
    sizes = [int(n) for n in sizes]
    count = len(sizes)
    if down_bytes_per_s is None:
        down_bytes_per_s = up_bytes_per_s
    if fixed is not None and len(fixed) != count:
        raise ValueError("fixed has %d entries for %d variables" % (len(fixed), count))
    candidates = auto_candidates(spec, sync)
    c_sizes = (ctypes.c_uint64 * max(count, 1))(*sizes)
    c_fixed = (ctypes.c_int * max(count, 1))(*[int(bool(f)) for f in fixed]) if fixed is not None else None
    choice = (ctypes.c_int * max(count, 1))()
    seconds = ctypes.c_double(0.0)
    check(lib.tg_auto_choose(spec.encode(), int(bool(sync)), c_sizes, c_fixed, count, float(up_bytes_per_s),
                             float(down_bytes_per_s), float(round_trip_s), int(replicas), int(num_ps), choice,
                             ctypes.byref(seconds)))
    return [candidates[choice[i]] if choice[i] >= 0 else "fp32" for i in range(count)], seconds.value
