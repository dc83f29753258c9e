#!/usr/bin/env python3
"""Independent pure-Python encoder for the TernGrad payloads (quantize/FORMAT.md): codecs 1, 2, 4, 5, 6.

Written from the spec, not from the C++ code: Philox4x32-10 and -7 (the
random streams of format versions 1 and 2), the canonical
float64 statistics order, float32 probability arithmetic (emulated with struct),
2-bit packing and the CRC-32 header. Used two ways:

  reference_encoder.py example          print the FORMAT.md worked example
  reference_encoder.py packed-example   print the worked examples of codecs 4, 5 and 6
  reference_encoder.py check-packed TG_CODEC TG_SUM_VECTOR
                                        the same for codecs 4, 5 (tg-codec encode
                                        --pack) and 6 (tg-sum-vector), the worked
                                        examples and random inputs
  reference_encoder.py check TG_CODEC   encode random tensors with this script
                                        and with `tg-codec encode`, require
                                        byte-identical payloads
"""
import itertools
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
STREAM_NAMES = {1: "philox10", 2: "philox7x16"}  # tg-codec --stream, by format version


def philox4x32(ctr, key, rounds):
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for rnd in range(rounds):
        if rnd:
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        p0, p1 = M0 * c0, M1 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0, p1 & MASK32, (p0 >> 32) ^ c3 ^ k1, p0 & MASK32)
    return c0, c1, c2, c3


def philox4x32_10(ctr, key):
    return philox4x32(ctr, key, 10)


def uniform24(i, seed, step, tensor_id, version):
    """FORMAT.md step 3: the 24-bit integer u element i compares against p * 2^24."""
    key = (seed & MASK32, seed >> 32)
    if version == 1:  # word i % 4 of Philox4x32-10 at block i / 4, top 24 bits
        k = i // 4
        return philox4x32((k & MASK32, k >> 32, step, tensor_id), key, 10)[i % 4] >> 8
    k = i // 8  # version 2: 16-bit half i % 8 of Philox4x32-7 at block i / 8, low half first
    h = (philox4x32((k & MASK32, k >> 32, step, tensor_id), key, 7)[(i % 8) // 2] >> (16 * (i % 2))) & 0xFFFF
    return 256 * h + 128


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


def ternary_codes(x, clip=2.5, seed=0, step=0, tensor_id=0, shared_scale=None, nearest=False, version=2):
    """FORMAT.md steps 1-5: the scale and every element's code (0 = zero, 1 = +s, 2 = -s)."""
    x = [f32(v) for v in x]
    n = len(x)
    s = scale_for(x, clip) if shared_scale is None else f32(shared_scale)
    pre = 2.0 ** 64 if 0 < s < 2.0 ** -64 else 1.0
    inv24 = f32(f32(1.0 / f32(s * pre)) * 2.0 ** 24) if s > 0 else 0.0
    codes = [0] * n
    for i in range(n):
        a = min(abs(x[i]), s)
        t = f32(f32(a * pre) * inv24)
        u = 2.0 ** 23 if nearest else float(uniform24(i, seed, step, tensor_id, version))
        if a > 0 and (a >= s or (t > u if nearest else u < t)):
            codes[i] = 2 if math.copysign(1.0, x[i]) < 0 else 1
    return s, codes


def header40(codec, flags, n, s, tensor_id, seed_field, step, version=1):
    head = b"TGRD" + struct.pack("<BBBBQfIQI", version, codec, flags, HEADER_BYTES, n, s, tensor_id, seed_field, step)
    return head + struct.pack("<I", zlib.crc32(head))


def flags_for(shared_scale, nearest):
    return (1 if shared_scale is not None else 0) | (2 if nearest else 0)


def payload_version(version, nearest):
    """Nearest rounding draws nothing: version 1 whatever stream was asked for."""
    return 1 if nearest else version


def encode(x, clip=2.5, seed=0, step=0, tensor_id=0, shared_scale=None, nearest=False, version=2):
    """Codec 1: 2 bits per element, 4 per byte, first element in the low bits."""
    s, codes = ternary_codes(x, clip, seed, step, tensor_id, shared_scale, nearest, version)
    body = bytearray((len(codes) + 3) // 4)
    for i, c in enumerate(codes):
        body[i // 4] |= c << (2 * (i % 4))
    return header40(1, flags_for(shared_scale, nearest), len(codes), s, tensor_id,
                    0 if nearest else seed, step, payload_version(version, nearest)) + bytes(body)


# ---------------------------------------------------------------------------
# Codec 4 (base-3) and the entropy-coded payloads (codecs 5 and 6), from
# FORMAT.md's sections of those names: plain integers, no magic division.

ENTROPY_HEADER_BYTES = 52
PROB_BITS = 14                 # symbol frequencies sum to 2^14
STATE_LOW = 1 << 16            # L: a lane's state lives in [2^16, 2^32)
ENCODER_BLOCK_LOG2 = 14        # encoders cut 2^14 symbols per block


def base3_symbols(digits, g=5, zero=0, a=3):
    """Digits (element values 0..a-1) -> base-a symbols of g digits, padding digits = zero."""
    nsym = (len(digits) + g - 1) // g
    padded = list(digits) + [zero] * (nsym * g - len(digits))
    return [sum(padded[k * g + j] * a ** j for j in range(g)) for k in range(nsym)]


def encode_base3(x, clip=2.5, seed=0, step=0, tensor_id=0, shared_scale=None, nearest=False, version=2):
    """Codec 4: the codec-1 header with codec id 4, one byte per 5 codes."""
    s, codes = ternary_codes(x, clip, seed, step, tensor_id, shared_scale, nearest, version)
    return header40(4, flags_for(shared_scale, nearest), len(codes), s, tensor_id,
                    0 if nearest else seed, step, payload_version(version, nearest)) + bytes(base3_symbols(codes))


def element_prob_bits(g):
    return 14 if g == 1 else 12


def group_for_alphabet(a):
    g = 0
    while a ** (g + 1) <= 255:
        g += 1
    return g


def encoder_lanes(nsym):
    k = 1
    while k < 32 and 2 * k <= nsym >> 8:
        k *= 2
    return k


def quantize_probs(counts, e):
    """Element probabilities q (sum 2^e) from a block's value counts."""
    total = sum(counts)
    q = [0 if c == 0 else max(1, (c << e) // total) for c in counts]
    top = counts.index(max(counts))            # most frequent value, lowest on ties
    q[top] += (1 << e) - sum(q)
    assert 1 <= q[top] <= 1 << e, "FORMAT.md: the margin argument says this cannot fail"
    return q


def symbol_freqs(q, a, g):
    """Symbol frequencies f (sum 2^14): products of the digits' q, scaled, clamped, remainder to the top."""
    shift = element_prob_bits(g) * g - PROB_BITS
    f = []
    for s in range(a ** g):
        w = 1
        for j in range(g):
            w *= q[(s // a ** j) % a]
        f.append(0 if w == 0 else max(1, w >> shift))
    top = f.index(max(f))                      # largest frequency, lowest symbol on ties
    f[top] += (1 << PROB_BITS) - sum(f)
    assert 1 <= f[top] <= 1 << PROB_BITS
    return f


def rans_block(syms, lanes, f):
    """One block's stream: lane states (u32, lane 0 first), then the 16-bit words in reading order."""
    cum = [sum(f[:s]) for s in range(len(f))]
    k = min(lanes, len(syms))
    x = [STATE_LOW] * k
    emitted = []
    for i in reversed(range(len(syms))):       # last symbol first; symbol i is lane i % k's
        l, s = i % k, syms[i]
        if x[l] >= f[s] << 18:                 # never for f = 2^14: x < 2^32
            emitted.append(x[l] & 0xFFFF)
            x[l] >>= 16
        x[l] = ((x[l] // f[s]) << PROB_BITS) + x[l] % f[s] + cum[s]
    return struct.pack(f"<{k}I", *x) + struct.pack(f"<{len(emitted)}H", *reversed(emitted))


def entropy_body(digits, a, zero):
    """Directory and streams for a digit sequence; also (g, lanes, block_log2, per-block details)."""
    g = group_for_alphabet(a)
    e = element_prob_bits(g)
    syms = base3_symbols(digits, g, zero, a)
    lanes = encoder_lanes(len(syms))
    per = 1 << ENCODER_BLOCK_LOG2
    directory, streams, blocks = b"", b"", []
    for b0 in range(0, len(syms), per):
        block = syms[b0:b0 + per]
        slots = digits[b0 * g:(b0 + len(block)) * g]
        counts = [slots.count(v) for v in range(a)]
        counts[zero] += len(block) * g - len(slots)  # padding digits count as the zero value
        q = quantize_probs(counts, e)
        f = symbol_freqs(q, a, g)
        stream = rans_block(block, lanes, f)
        directory += struct.pack(f"<I{a}H", len(stream), *q)
        streams += stream
        blocks.append(dict(counts=counts, q=q, f=f, stream=stream, syms=block))
    return directory + streams, g, lanes, blocks


def entropy_header(codec, flags, n, s, tensor_id, seed_field, step, lanes, g, length, version=1):
    head = b"TGRD" + struct.pack("<BBBBQfIQIBBBBQ", version, codec, flags, ENTROPY_HEADER_BYTES, n, s, tensor_id,
                                 seed_field, step, lanes, ENCODER_BLOCK_LOG2, g, 0, length)
    return head + struct.pack("<I", zlib.crc32(head))


def encode_entropy(x, clip=2.5, seed=0, step=0, tensor_id=0, shared_scale=None, nearest=False, details=None,
                   version=2):
    """Codec 5 when strictly smaller than codec 4, else codec 4."""
    s, codes = ternary_codes(x, clip, seed, step, tensor_id, shared_scale, nearest, version)
    body, g, lanes, blocks = entropy_body(codes, 3, 0)
    length = ENTROPY_HEADER_BYTES + len(body)
    flags, seed_field = flags_for(shared_scale, nearest), 0 if nearest else seed
    v = payload_version(version, nearest)
    base3 = header40(4, flags, len(codes), s, tensor_id, seed_field, step, v) + bytes(base3_symbols(codes))
    if details is not None:
        details.update(codes=codes, blocks=blocks, lanes=lanes)
    if length >= len(base3):
        return base3
    return entropy_header(5, flags, len(codes), s, tensor_id, seed_field, step, lanes, g, length, v) + body


def sum_bits(r):
    return (2 * r).bit_length()


def encode_sum(counts, scale, r, tensor_id=0, step=0):
    """Codec 2: count + R in b-bit fields of a little-endian bit stream."""
    b = sum_bits(r)
    acc = 0
    for i, c in enumerate(counts):
        acc |= (c + r) << (i * b)
    body = acc.to_bytes((len(counts) * b + 7) // 8, "little")
    return header40(2, 1, len(counts), f32(scale), tensor_id, r | (b << 32), step) + body


def encode_sum_entropy(counts, scale, r, tensor_id=0, step=0, details=None):
    """Codec 6 when R <= 127 and strictly smaller than codec 2, else codec 2."""
    fixed = encode_sum(counts, scale, r, tensor_id, step)
    if r > 127:
        return fixed
    a = 2 * r + 1
    body, g, lanes, blocks = entropy_body([c + r for c in counts], a, r)
    if details is not None:
        details.update(blocks=blocks, lanes=lanes, g=g)
    length = ENTROPY_HEADER_BYTES + len(body)
    if length >= len(fixed):
        return fixed
    return entropy_header(6, 1, len(counts), f32(scale), tensor_id, r, step, lanes, g, length) + body


def worked_example():
    x = [0.5, -1.0, 0.25, 0.0, -0.125, 2.0]
    print("input:", x, "clip 0, seed 42, step 7, tensor id 3")
    print("version 1 (Philox4x32-10, a 32-bit word per element):")
    for k in range(2):
        w = philox4x32_10((k, 0, 7, 3), (42, 0))
        print(f"  philox block {k}:", " ".join(f"{v:08x}" for v in w),
              " u24:", " ".join(str(v >> 8) for v in w))
    print("  payload:", encode(x, clip=0.0, seed=42, step=7, tensor_id=3, version=1).hex(" "))
    print("version 2 (Philox4x32-7, a 16-bit half word per element), seed 50:")
    w = philox4x32((0, 0, 7, 3), (50, 0), 7)
    halves = [(w[i // 2] >> (16 * (i % 2))) & 0xFFFF for i in range(8)]
    print("  philox block 0:", " ".join(f"{v:08x}" for v in w))
    print("  halves:", " ".join(f"{h:04x}" for h in halves), " u = 256 h + 128:",
          " ".join(str(256 * h + 128) for h in halves))
    print("  payload:", encode(x, clip=0.0, seed=50, step=7, tensor_id=3, version=2).hex(" "))


def example_entropy_input():
    """FORMAT.md's codec-5 example: 402 elements, mostly zero."""
    x = [0.0] * 402
    for i in range(402):
        x[i] = {3: 1.0, 17: -0.75, 29: 0.25}.get(i % 40, 0.0)
    return x


def example_sum_counts():
    """FORMAT.md's codec-6 example: 200 counts of a sum of R = 2 payloads."""
    return [{0: 2, 7: -1, 13: 1, 20: -2}.get(i % 25, 0) for i in range(200)]


def hex_rows(data, width=16):
    return "\n".join(data[i:i + width].hex(" ") for i in range(0, len(data), width))


def print_blocks(blocks, a):
    for j, b in enumerate(blocks):
        print(f"block {j}: {len(b['syms'])} symbols, value counts {b['counts']}, q {b['q']}")
        print("  nonzero f:", ", ".join(f"{s}:{v}" for s, v in enumerate(b["f"]) if v))
        print(f"  stream {len(b['stream'])} bytes")


def packed_examples():
    x = [0.5, -1.0, 0.25, 0.0, -0.125, 2.0]
    b3 = encode_base3(x, clip=0.0, seed=42, step=7, tensor_id=3, version=1)
    print("codec 4 (base-3), the codec-1 example's input:")
    print(hex_rows(b3))
    d = {}
    ent = encode_entropy(example_entropy_input(), clip=0.0, step=7, tensor_id=3, nearest=True, details=d)
    base3_len = HEADER_BYTES + (402 + 4) // 5
    print(f"codec 5 (entropy), 402 elements, clip 0, nearest, tensor id 3, step 7: "
          f"{len(ent)} bytes (base-3: {base3_len}), codec {ent[5]}, lanes {d['lanes']}")
    print("symbols:", " ".join(str(s) for s in d["blocks"][0]["syms"]))
    print_blocks(d["blocks"], 3)
    print(hex_rows(ent))
    d = {}
    counts = example_sum_counts()
    s6 = encode_sum_entropy(counts, 0.5, 2, tensor_id=3, step=7, details=d)
    print(f"codec 6 (entropy sum), 200 counts, R = 2, scale 0.5, tensor id 3, step 7: "
          f"{len(s6)} bytes (codec 2: {len(encode_sum(counts, 0.5, 2))}), codec {s6[5]}, "
          f"g {d['g']}, lanes {d['lanes']}")
    print("symbols:", " ".join(str(s) for s in d["blocks"][0]["syms"]))
    print_blocks(d["blocks"], 5)
    print(hex_rows(s6))
    return b3, ent, s6


def check(tg_codec):
    rng = random.Random(1234)
    with tempfile.TemporaryDirectory() as tmp:
        cases = 0
        for n in (0, 1, 5, 63, 64, 65, 4095, 4097, 9000):
            for (clip, seed, step, tid), version in itertools.product(((2.5, 1, 2, 3), (0.0, 2**40 + 5, 99, 0)), (1, 2)):
                x = [f32(rng.gauss(0.0, 1e-3) * (30 if rng.random() < 0.01 else 1)) for _ in range(n)]
                raw = os.path.join(tmp, "x.f32")
                with open(raw, "wb") as f:
                    f.write(struct.pack(f"<{n}f", *x))
                out = os.path.join(tmp, "x.tgrd")
                subprocess.run([tg_codec, "encode", raw, out, "--clip", repr(clip), "--seed", str(seed),
                                "--step", str(step), "--tensor-id", str(tid), "--stream", STREAM_NAMES[version]],
                               check=True, stdout=subprocess.DEVNULL)
                with open(out, "rb") as f:
                    got = f.read()
                want = encode(x, clip, seed, step, tid, version=version)
                if got != want:
                    diff = next(i for i in range(min(len(got), len(want))) if got[i] != want[i]) \
                        if len(got) == len(want) else "length"
                    print(f"FAIL n={n} clip={clip} version={version}: first differing byte {diff}")
                    return 1
                cases += 1
    print(f"{cases} passed, 0 failed")
    return 0


def check_packed(tg_codec, sum_vector):
    """Codecs 4, 5 and 6: the worked examples and random inputs, this script against the C++ encoders."""
    rng = random.Random(4321)
    failures, cases = 0, 0

    def compare(what, got, want):
        nonlocal failures, cases
        cases += 1
        if got != want:
            diff = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), "length")
            print(f"FAIL {what}: C++ {len(got)} bytes (codec {got[5] if len(got) > 5 else '?'}), "
                  f"Python {len(want)} (codec {want[5] if len(want) > 5 else '?'}), first difference at {diff}")
            failures += 1

    with tempfile.TemporaryDirectory() as tmp:
        raw, out = os.path.join(tmp, "x.f32"), os.path.join(tmp, "x.tgrd")

        def tg_encode(x, pack, clip, seed, step, tid, nearest=False, shared=None, version=2):
            with open(raw, "wb") as f:
                f.write(struct.pack(f"<{len(x)}f", *x))
            args = [tg_codec, "encode", raw, out, "--pack", pack, "--clip", repr(clip), "--seed", str(seed),
                    "--step", str(step), "--tensor-id", str(tid), "--stream", STREAM_NAMES[version]]
            if nearest:
                args += ["--round", "nearest"]
            if shared is not None:
                args += ["--shared-scale", repr(shared)]
            subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
            with open(out, "rb") as f:
                return f.read()

        def tg_sum(counts, r, scale, tid, step):
            with open(raw, "wb") as f:
                f.write(struct.pack(f"<{len(counts)}h", *counts))
            subprocess.run([sum_vector, raw, str(r), repr(scale), str(tid), str(step), out], check=True)
            with open(out, "rb") as f:
                return f.read()

        # The worked examples (FORMAT.md).
        x = [0.5, -1.0, 0.25, 0.0, -0.125, 2.0]
        compare("codec-4 example", tg_encode(x, "base3", 0.0, 42, 7, 3, version=1),
                encode_base3(x, 0.0, 42, 7, 3, version=1))
        x = example_entropy_input()
        want = encode_entropy(x, 0.0, 0, 7, 3, nearest=True)
        if want[5] != 5:
            print("FAIL codec-5 example: the spec's encoder did not choose codec 5")
            failures += 1
        compare("codec-5 example", tg_encode(x, "entropy", 0.0, 0, 7, 3, nearest=True), want)
        c = example_sum_counts()
        want = encode_sum_entropy(c, 0.5, 2, 3, 7)
        if want[5] != 6:
            print("FAIL codec-6 example: the spec's encoder did not choose codec 6")
            failures += 1
        compare("codec-6 example", tg_sum(c, 2, 0.5, 3, 7), want)

        # Random worker payloads: Gaussian with rare outliers, and sparse ones;
        # 90000 elements are two blocks of 32 lanes (the second one short).
        for n in (0, 1, 4, 5, 6, 99, 1283, 5003, 90000):
            for sparse in (False, True):
                x = [0.0 if sparse and rng.random() < 0.9 else f32(rng.gauss(0.0, 1e-3) * (30 if rng.random() < 0.01 else 1))
                     for _ in range(n)]
                seed, step, tid = rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32)
                nearest = sparse and n % 2 == 1
                version = 1 + (n + sparse) % 2
                for pack, enc in (("base3", encode_base3), ("entropy", encode_entropy)):
                    compare(f"{pack} n={n} sparse={sparse} nearest={nearest} version={version}",
                            tg_encode(x, pack, 2.5, seed, step, tid, nearest, version=version),
                            enc(x, 2.5, seed, step, tid, nearest=nearest, version=version))
        x = [f32(rng.gauss(0.0, 1.0)) for _ in range(20000)]
        compare("entropy with a shared scale", tg_encode(x, "entropy", 2.5, 5, 6, 7, shared=9.5),
                encode_entropy(x, 2.5, 5, 6, 7, shared_scale=9.5))

        # Random sums: R from 1 to 128 (127 is the last codec-6 one), mostly small counts.
        for r, n in ((1, 0), (1, 7), (1, 3000), (2, 40000), (3, 5000), (4, 100003), (7, 999), (8, 2000),
                     (50, 1000), (127, 3000), (128, 500)):
            counts = [0 if rng.random() < 0.7 else max(-r, min(r, round(rng.gauss(0, r / 3)))) for _ in range(n)]
            scale, tid, step = f32(rng.uniform(0.01, 3.0)), rng.getrandbits(32), rng.getrandbits(32)
            compare(f"sum R={r} n={n}", tg_sum(counts, r, scale, tid, step),
                    encode_sum_entropy(counts, scale, r, tid, step))
    print(f"{cases - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "example":
        worked_example()
    elif len(sys.argv) >= 2 and sys.argv[1] == "packed-example":
        packed_examples()
    elif len(sys.argv) == 4 and sys.argv[1] == "check-packed":
        sys.exit(check_packed(sys.argv[2], sys.argv[3]))
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    else:
        print(__doc__)
        sys.exit(2)
