#!/usr/bin/env python3
"""The stock TensorBoard loads an event file written by tg-tensorboard.

Usage: tensorboard_reads_events.py PATH_TO_TG_TENSORBOARD

Builds a small run directory from fabricated metrics lines, converts it with
tg-tensorboard and reads it back with TensorBoard's own EventAccumulator.
Exits 77 (ctest's skip) when the tensorboard package is not importable.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    import tensorboard
except ImportError as e:
    print(f"SKIP: tensorboard is not importable by {sys.executable} ({e}); "
          "configure with -DTG_TENSORBOARD_PYTHON=<python with tensorboard>")
    sys.exit(77)

# Fabricated test inputs: two train lines and one evaluation.
TRAIN = [
    {"event": "train", "step": 10, "loss": 1.87, "learning_rate": 0.01,
     "examples_per_sec": 2387.85, "bytes_sent_per_worker": 314341, "bytes_recv_per_worker": 943023},
    {"event": "train", "step": 20, "loss": 1.25, "learning_rate": 0.0099,
     "examples_per_sec": 2400.0, "bytes_sent_per_worker": 314341, "bytes_recv_per_worker": 943023},
]
EVAL = {"event": "eval", "step": 20, "top1": 0.8877, "top5": 0.9972, "examples": 10000,
        "ema_top1": 0.897, "ema_top5": 0.9979}

EXPECTED = {
    "train/loss": {10: 1.87, 20: 1.25},
    "train/learning_rate": {10: 0.01, 20: 0.0099},
    "train/examples_per_sec": {10: 2387.85, 20: 2400.0},
    "comm/bytes_sent_per_worker": {10: 314341, 20: 314341},
    "comm/bytes_sent_per_worker_cumulative": {10: 3143410, 20: 6286820},
    "eval/top1": {20: 0.8877},
    "eval/top5": {20: 0.9972},
    "eval/ema_top1": {20: 0.897},
    "eval/ema_top5": {20: 0.9979},
}


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as run_dir:
        with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
            for line in TRAIN + [EVAL]:
                f.write(json.dumps(line) + "\n")
        subprocess.run([sys.argv[1], run_dir], check=True)

        acc = EventAccumulator(run_dir)
        acc.Reload()
        tags = sorted(acc.Tags()["scalars"])
        failures = []
        if tags != sorted(EXPECTED):
            failures.append(f"scalar tags {tags}, expected {sorted(EXPECTED)}")
        for tag, expected in EXPECTED.items():
            if tag not in tags:
                continue
            got = {e.step: e.value for e in acc.Scalars(tag)}
            if sorted(got) != sorted(expected):
                failures.append(f"{tag}: steps {sorted(got)}, expected {sorted(expected)}")
                continue
            for step, value in expected.items():
                # simple_value is float32: compare to float32 precision.
                if abs(got[step] - value) > 1e-6 * max(1.0, abs(value)):
                    failures.append(f"{tag} step {step}: {got[step]}, expected {value}")
        if failures:
            print("FAIL:\n  " + "\n  ".join(failures))
            return 1
        print(f"tensorboard {tensorboard.__version__} read {len(tags)} scalar tags correctly")
        return 0


if __name__ == "__main__":
    sys.exit(main())
