#!/usr/bin/env python3
"""Files our TFRecord writer produces, read by independent code.

Writes a tiny Fashion-MNIST-like IDX set, converts it with
tg-fmnist-to-tfrecord (argv[1]) into 3 train and 2 validation shards, then
reads every shard back without our code: framing and masked CRC-32Cs checked
with the PyPI `crc32c` package, each record parsed as tf.train.Example by the
PyPI `tfrecord` package's example_pb2, the PNG decoded by Pillow. Pixels,
labels, sizes and the shard split must be exactly what went in.

Needs `tfrecord` (which pulls crc32c and protobuf) and Pillow; without them
it exits 77 (ctest: skipped). CI: pip install tfrecord pillow, or set
TG_TFRECORD_PYTHONPATH to a --target directory holding them.
"""
import gzip
import io
import os
import struct
import subprocess
import sys
import tempfile

try:
    import crc32c
    from PIL import Image
    from tfrecord import example_pb2
except ImportError as e:  # not installed: skip
    print("skipped: %s" % e)
    sys.exit(77)


def masked(data):
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        blob = f.read()
    pos, out = 0, []
    while pos < len(blob):
        (length,) = struct.unpack_from("<Q", blob, pos)
        (lcrc,) = struct.unpack_from("<I", blob, pos + 8)
        assert lcrc == masked(blob[pos:pos + 8]), "%s @%d: length CRC" % (path, pos)
        data = blob[pos + 12:pos + 12 + length]
        (dcrc,) = struct.unpack_from("<I", blob, pos + 12 + length)
        assert dcrc == masked(data), "%s @%d: data CRC" % (path, pos)
        out.append(data)
        pos += 16 + length
    assert pos == len(blob), path
    return out


def write_idx(d, stem, images, labels):
    with open(os.path.join(d, stem + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, len(images), 28, 28) + b"".join(images))
    with gzip.open(os.path.join(d, stem + "-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">II", 0x801, len(labels)) + bytes(labels))


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "idx"), os.path.join(tmp, "tfr")
        os.mkdir(src)
        img = lambda i: bytes((i * 13 + p * 7) % 256 for p in range(28 * 28))
        train = [(img(i), i % 10) for i in range(20)]
        test = [(img(100 + i), (i * 3) % 10) for i in range(7)]
        write_idx(src, "train", [x for x, _ in train], [y for _, y in train])
        write_idx(src, "t10k", [x for x, _ in test], [y for _, y in test])
        subprocess.run([tool, "--data_dir=" + src, "--out=" + out, "--train_shards=3", "--validation_shards=2"],
                       check=True, stdout=subprocess.DEVNULL)
        for split, n, want in (("train", 3, train), ("validation", 2, test)):
            got = []
            for k in range(n):
                name = "%s-%05d-of-%05d" % (split, k, n)
                shard = records(os.path.join(out, name))
                assert len(shard) == len(want) * (k + 1) // n - len(want) * k // n, (name, len(shard))
                for rec in shard:
                    ex = example_pb2.Example()
                    ex.ParseFromString(bytes(rec))
                    f = ex.features.feature
                    assert f["image/format"].bytes_list.value == [b"png"], name
                    assert [f[k].int64_list.value[0] for k in ("image/height", "image/width", "image/channels")] == [28, 28, 1]
                    png = Image.open(io.BytesIO(f["image/encoded"].bytes_list.value[0]))
                    assert png.mode == "L" and png.size == (28, 28), (name, png.mode, png.size)
                    got.append((png.tobytes(), f["image/class/label"].int64_list.value[0]))
            assert got == want, "%s: pixels or labels differ" % split
            print("ok %s: %d examples in %d shards read by tfrecord/crc32c/Pillow" % (split, len(got), n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
