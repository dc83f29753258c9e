"""An ef(...) codec's state, cut by parameter and put back together.

DDP hands a communication hook buckets of gradients, and rebuilds them after
its first iteration (in the order gradients became ready), so a bucket's
index does not name the same parameters for the whole run. An ef(...)
codec's residual belongs to the elements it was accumulated for, so it is
carried over by parameter: split() cuts a codec's state blob into one
residual (and momentum) per parameter of the bucket it served, join() builds
the blob of a bucket from its parameters' parts.

The blob is comm/codecs/FORMATS.md's "ef(<codec>) worker state":
  "TGEF" | u32 version 1 | u64 n | u8 has_momentum | u8 has_inner | 2 zero bytes
  | n float32 residual | (n float32 momentum) | (the inner codec's state)
The inner codec's own state (ef(powersgd)'s warm-start Q, a matrix of the
whole bucket) cannot be cut by parameter: split() drops it, and the inner
codec starts again from its initial draw, as on the first step.
"""
import struct

import numpy as np

_MAGIC = b"TGEF"
_VERSION = 1
_HEADER = struct.Struct("<4sIQBBH")  # 20 bytes


class ParamState:
    """One parameter's part of an ef(...) state: float32 residual, and momentum or None."""

    __slots__ = ("residual", "momentum")

    def __init__(self, residual, momentum=None):
        self.residual = np.ascontiguousarray(residual, dtype=np.float32)
        self.momentum = None if momentum is None else np.ascontiguousarray(momentum, dtype=np.float32)
        if self.momentum is not None and self.momentum.shape != self.residual.shape:
            raise ValueError("momentum has %d elements, the residual %d" % (self.momentum.size, self.residual.size))

    def scaled(self, factor):
        return ParamState(self.residual * np.float32(factor),
                          None if self.momentum is None else self.momentum * np.float32(factor))


def split(blob, sizes):
    """A codec's state blob -> one ParamState per size (the bucket's
    parameters' element counts, in bucket order), or None for an empty blob
    (nothing encoded yet). Raises ValueError naming what does not fit."""
    blob = bytes(blob)
    if not blob:
        return None
    if len(blob) < _HEADER.size:
        raise ValueError("ef state: %d bytes, shorter than the %d-byte header" % (len(blob), _HEADER.size))
    magic, version, n, has_momentum, _has_inner, zero = _HEADER.unpack_from(blob)
    if magic != _MAGIC or version != _VERSION or zero != 0 or has_momentum > 1:
        raise ValueError("ef state: not a version-%d ef(...) state (magic %r, version %d)" % (_VERSION, magic, version))
    if n != sum(sizes):
        raise ValueError("ef state: the residual holds %d elements, the bucket's parameters %d" % (n, sum(sizes)))
    arrays = 2 if has_momentum else 1
    if len(blob) < _HEADER.size + 4 * n * arrays:
        raise ValueError("ef state: %d bytes do not hold %d array(s) of %d floats" % (len(blob), arrays, n))
    residual = np.frombuffer(blob, dtype="<f4", count=n, offset=_HEADER.size)
    momentum = (np.frombuffer(blob, dtype="<f4", count=n, offset=_HEADER.size + 4 * n) if has_momentum else None)
    parts, begin = [], 0
    for size in sizes:
        end = begin + size
        parts.append(ParamState(residual[begin:end], None if momentum is None else momentum[begin:end]))
        begin = end
    return parts


def join(parts):
    """ParamStates in bucket order -> the blob ef(...).load_state() takes.
    Either every part has a momentum buffer or none has."""
    with_momentum = {p.momentum is not None for p in parts}
    if len(with_momentum) > 1:
        raise ValueError("ef state: some parameters carry momentum and some do not")
    has_momentum = with_momentum == {True}
    n = sum(p.residual.size for p in parts)
    arrays = [p.residual for p in parts] + ([p.momentum for p in parts] if has_momentum else [])
    body = b"".join(a.astype("<f4", copy=False).tobytes() for a in arrays)
    return _HEADER.pack(_MAGIC, _VERSION, n, 1 if has_momentum else 0, 0, 0) + body


def reshard(rank_states, new_world):
    """Per-rank {key: ParamState} dicts of a run with W = len(rank_states)
    ranks -> new_world such dicts whose residuals keep the run's total
    error: the hook averages over ranks, so the mass still to be sent is
    sum(residuals) / W, and each new rank gets old ranks' residuals scaled
    by new_world / W (shrinking: rank j sums the old ranks i with
    i % new_world == j; growing: old rank i is shared by the new ranks j
    with j % W == i, each taking its share)."""
    old_world = len(rank_states)
    if old_world < 1 or new_world < 1:
        raise ValueError("reshard: world sizes must be >= 1 (got %d -> %d)" % (old_world, new_world))
    if new_world <= old_world:
        pairs = [(i, i % new_world) for i in range(old_world)]
    else:
        pairs = [(j % old_world, j) for j in range(new_world)]
    takers = [sum(1 for i, _ in pairs if i == old) for old in range(old_world)]
    out = [dict() for _ in range(new_world)]
    for i, j in pairs:
        factor = new_world / old_world / takers[i]
        for key, part in rank_states[i].items():
            add = part.scaled(factor)
            if key in out[j]:
                have = out[j][key]
                out[j][key] = ParamState(have.residual + add.residual,
                                         None if have.momentum is None else have.momentum + add.momentum)
            else:
                out[j][key] = add
    return out


__all__ = ["ParamState", "split", "join", "reshard"]
