#!/usr/bin/env python3
"""Writes the golden TFRecord files in this folder with an independent writer.

The writer is the PyPI package `tfrecord` (its TFRecordWriter frames records
with the `crc32c` package's CRC and serializes tf.train.Example with its own
generated example_pb2); PNGs are encoded by Pillow. Neither shares code with
train/data, so tfrecord_golden_test.cpp checks our reader against them.

    pip install --target /tmp/tfr tfrecord      # pulls crc32c, protobuf, numpy
    PYTHONPATH=/tmp/tfr python3 tests/data/tfrecord/make_golden.py

The files are committed (a few KB); regenerate only when adding cases. The
expected pixels are a pure function of (index, y, x, c), written out in
golden_expected.txt for the C++ test.
"""
import io
import os
import sys

import tfrecord
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))


def pixel(i, y, x, c):
    return (37 * i + 11 * y + 5 * x + 71 * c) % 256


def image(i, h, w, ch):
    return bytes(pixel(i, y, x, c) for y in range(h) for x in range(w) for c in range(ch))


def png(i, h, w, ch):
    mode = {1: "L", 3: "RGB"}[ch]
    buf = io.BytesIO()
    Image.frombytes(mode, (w, h), image(i, h, w, ch)).save(buf, format="PNG")
    return buf.getvalue()


def example(encoded, fmt, label, h, w, ch, extra):
    d = {
        "image/encoded": (encoded, "byte"),
        "image/format": (fmt, "byte"),
        "image/class/label": (label, "int"),
        "image/height": (h, "int"),
        "image/width": (w, "int"),
        "image/channels": (ch, "int"),
    }
    if extra:  # what slim's image_to_tfexample adds besides: ignored by readers
        d["image/class/text"] = (b"class %d" % label, "byte")
        d["image/colorspace"] = (b"RGB", "byte")
        d["image/object/bbox/xmin"] = ([0.25, 0.5], "float")
    return d


def main():
    expected = []
    # MNIST-style: 3 gray 6x5 PNGs in one file (labels 0, 7, 9).
    w = tfrecord.TFRecordWriter(os.path.join(HERE, "golden_png_gray.tfrecord"))
    for i, label in enumerate([0, 7, 9]):
        w.write(example(png(i, 6, 5, 1), b"png", label, 6, 5, 1, extra=(i == 1)))
        expected.append(("golden_png_gray.tfrecord", i, label, 6, 5, 1))
    w.close()
    # CIFAR-style: RGB 4x4, raw pixels in two shards of a set (2 + 1 records).
    for shard, idx in enumerate([[10, 11], [12]]):
        name = "golden-raw-%05d-of-00002" % shard
        w = tfrecord.TFRecordWriter(os.path.join(HERE, name))
        for r, i in enumerate(idx):
            w.write(example(image(i, 4, 4, 3), b"raw", i - 10 + 1, 4, 4, 3, extra=True))
            expected.append((name, i, i - 10 + 1, 4, 4, 3))
        w.close()
    # A file with no records at all (a valid, empty TFRecord file).
    tfrecord.TFRecordWriter(os.path.join(HERE, "golden_no_records.tfrecord")).close()
    with open(os.path.join(HERE, "golden_expected.txt"), "w") as f:
        f.write("# file index label height width channels; pixel = (37*index + 11*y + 5*x + 71*c) % 256\n")
        for e in expected:
            f.write("%s %d %d %d %d %d\n" % e)


if __name__ == "__main__":
    sys.exit(main())
