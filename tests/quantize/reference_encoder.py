#!/usr/bin/env python3
"""Independent pure-Python encoder for the TernGrad 2-bit format (quantize/FORMAT.md).

Written from the spec, not from the C++ code: Philox4x32-10, the canonical
float64 statistics order, float32 probability arithmetic (emulated with struct),
2-bit packing and the CRC-32 header. Used two ways:

  reference_encoder.py example          print the FORMAT.md worked example
  reference_encoder.py check TG_CODEC   encode random tensors with this script
                                        and with `tg-codec encode`, require
                                        byte-identical payloads
"""
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import zlib
from fractions import Fraction

M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF
CHUNK, LANES = 4096, 32
HEADER_BYTES = 40


def philox4x32_10(ctr, key):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for rnd in range(10):
        if rnd:
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32)
    return c0, c1, c2, c3


def f32(x):
    """Round a Python float (double) to the nearest float32."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def butterfly(lanes):
    lanes = list(lanes)
    off = LANES // 2
    while off:
        for l in range(off):
            lanes[l] += lanes[l + off]
        off //= 2
    return lanes[0]


def canonical_sums(x):
    """Sum and sum of squares in the spec's fixed order (chunks, strided lanes, butterfly)."""
    part_s, part_q = [], []
    for c0 in range(0, len(x), CHUNK):
        ls, lq = [0.0] * LANES, [0.0] * LANES
        for e, v in enumerate(x[c0:c0 + CHUNK]):
            ls[e % LANES] += v
            lq[e % LANES] += v * v
        part_s.append(butterfly(ls))
        part_q.append(butterfly(lq))
    ls, lq = [0.0] * LANES, [0.0] * LANES
    for c, (s, q) in enumerate(zip(part_s, part_q)):
        ls[c % LANES] += s
        lq[c % LANES] += q
    return butterfly(ls), butterfly(lq)


def scale_for(x, clip):
    n = len(x)
    max_abs = max((abs(v) for v in x), default=0.0)
    if n == 0 or max_abs == 0.0:
        return 0.0
    s, q = canonical_sums(x)
    mean = s / n
    # fma(-mean, mean, q/n) with one rounding: exact rationals, then float() rounds once.
    var = max(float(-Fraction(mean) * Fraction(mean) + Fraction(q / n)), 0.0)
    sigma = math.sqrt(var)
    if clip > 0:
        clipped = f32(clip) * sigma
        if clipped < max_abs and f32(clipped) > 0:
            return f32(clipped)
    return max_abs


def encode(x, clip=2.5, seed=0, step=0, tensor_id=0, shared_scale=None):
    x = [f32(v) for v in x]
    n = len(x)
    s = scale_for(x, clip) if shared_scale is None else f32(shared_scale)
    pre = 2.0 ** 64 if 0 < s < 2.0 ** -64 else 1.0
    inv24 = f32(f32(1.0 / f32(s * pre)) * 2.0 ** 24) if s > 0 else 0.0
    body = bytearray((n + 3) // 4)
    key = (seed & MASK32, seed >> 32)
    for k in range(len(body)):
        words = philox4x32_10((k & MASK32, k >> 32, step, tensor_id), key)
        byte = 0
        for j in range(4):
            i = 4 * k + j
            if i >= n:
                break
            a = min(abs(x[i]), s)
            t = f32(f32(a * pre) * inv24)
            u = float(words[j] >> 8)
            if a > 0 and (a >= s or u < t):
                byte |= (0b10 if math.copysign(1.0, x[i]) < 0 else 0b01) << (2 * j)
        body[k] = byte
    flags = 1 if shared_scale is not None else 0
    head = b"TGRD" + struct.pack("<BBBBQfIQI", 1, 1, flags, HEADER_BYTES, n, s, tensor_id, seed, step)
    head += struct.pack("<I", zlib.crc32(head))
    return head + bytes(body)


def worked_example():
    x = [0.5, -1.0, 0.25, 0.0, -0.125, 2.0]
    payload = encode(x, clip=0.0, seed=42, step=7, tensor_id=3)
    print("input:", x, "clip 0, seed 42, step 7, tensor id 3")
    for k in range(2):
        w = philox4x32_10((k, 0, 7, 3), (42, 0))
        print(f"philox block {k}:", " ".join(f"{v:08x}" for v in w),
              " u24:", " ".join(str(v >> 8) for v in w))
    print("payload:", payload.hex(" "))


def check(tg_codec):
    rng = random.Random(1234)
    with tempfile.TemporaryDirectory() as tmp:
        cases = 0
        for n in (0, 1, 5, 63, 64, 65, 4095, 4097, 9000):
            for clip, seed, step, tid in ((2.5, 1, 2, 3), (0.0, 2**40 + 5, 99, 0)):
                x = [f32(rng.gauss(0.0, 1e-3) * (30 if rng.random() < 0.01 else 1)) for _ in range(n)]
                raw = os.path.join(tmp, "x.f32")
                with open(raw, "wb") as f:
                    f.write(struct.pack(f"<{n}f", *x))
                out = os.path.join(tmp, "x.tgrd")
                subprocess.run([tg_codec, "encode", raw, out, "--clip", repr(clip), "--seed", str(seed),
                                "--step", str(step), "--tensor-id", str(tid)],
                               check=True, stdout=subprocess.DEVNULL)
                with open(out, "rb") as f:
                    got = f.read()
                want = encode(x, clip, seed, step, tid)
                if got != want:
                    diff = next(i for i in range(min(len(got), len(want))) if got[i] != want[i]) \
                        if len(got) == len(want) else "length"
                    print(f"FAIL n={n} clip={clip}: first differing byte {diff}")
                    return 1
                cases += 1
    print(f"{cases} passed, 0 failed")
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "example":
        worked_example()
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    else:
        print(__doc__)
        sys.exit(2)
