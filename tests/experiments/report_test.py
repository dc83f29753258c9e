#!/usr/bin/env python3
"""tg_report.py on fabricated run directories: the CSV numbers, the plots, the errors.

The inputs are clearly synthetic (2 codecs x 2 worker counts x 2 seeds with
chosen accuracies); the expected numbers are computed here from those inputs
with the definitions (mean, sample std, difference to fp32, bytes ratio).
Exits 77 (ctest's skip) when matplotlib or numpy is not importable.
"""
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401
    import numpy  # noqa: F401
except ImportError as e:
    print(f"SKIP: {sys.executable} cannot import matplotlib/numpy ({e})")
    sys.exit(77)

REPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "tg_report.py")

FP32_BYTES = 5024320.0
SENT = {"fp32": 5024448.0, "terngrad": 314341.0}
# (codec, workers) -> {seed: (top1, top5, ema_top1, wall_seconds, examples_per_sec)}
RUNS = {
    ("fp32", 2): {1: (0.90, 0.99, 0.905, 100.0, 2000.0), 2: (0.92, 0.995, 0.915, 110.0, 2100.0)},
    ("terngrad", 2): {1: (0.89, 0.985, 0.895, 90.0, 2200.0), 2: (0.90, 0.99, 0.90, 95.0, 2300.0)},
    ("fp32", 4): {1: (0.91, 0.996, 0.92, 200.0, 3000.0), 2: (0.93, 0.998, 0.925, 210.0, 3100.0)},
    ("terngrad", 4): {1: (0.895, 0.99, 0.90, 180.0, 3300.0), 2: (0.915, 0.997, 0.91, 170.0, 3500.0)},
}
STEPS = 100


def write_run(root, codec, workers, seed, values, distributed):
    top1, top5, ema_top1, wall, eps = values
    run_dir = os.path.join(root, f"synthetic-{codec}-w{workers}", f"seed{seed}")
    os.makedirs(run_dir)
    result = {"net": "lenet", "num_nodes": workers, "batch_size": 16, "grad_bits": 32 if codec == "fp32" else 2,
              "seed": seed, "steps": STEPS, "top1": top1, "top5": top5, "ema_top1": ema_top1, "ema_top5": top5,
              "eval_examples": 10000, "final_loss": 0.1, "bytes_sent_per_worker_step": SENT[codec],
              "bytes_recv_per_worker_step": 3 * SENT[codec], "fp32_bytes_per_worker_step": FP32_BYTES,
              "examples_per_sec": eps, "wall_seconds": wall, "codecs": "synthetic"}
    with open(os.path.join(run_dir, "result.json"), "w") as f:
        json.dump(result, f)
    # The driver's run.json names the experiment with codec and workers in it;
    # the report must strip those to pair terngrad with its fp32 baseline.
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump({"experiment": f"synthetic-lenet-{codec}-w{workers}", "codec": codec, "workers": workers,
                   "seed": seed, "dataset": "fabricated", "net": "lenet"}, f)
    train = [{"event": "train", "step": s, "loss": 2.0 / s + 0.01 * seed, "learning_rate": 0.01,
              "examples_per_sec": eps, "bytes_sent_per_worker": SENT[codec],
              "bytes_recv_per_worker": 3 * SENT[codec]} for s in range(10, STEPS + 1, 10)]
    evals = [{"event": "eval", "step": 50, "top1": top1 - 0.05, "top5": top5, "examples": 10000},
             {"event": "eval", "step": STEPS, "top1": top1, "top5": top5, "examples": 10000}]
    # A distributed run writes its evaluations to eval.jsonl instead.
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        for row in train + ([] if distributed else evals):
            f.write(json.dumps(row) + "\n")
    if distributed:
        with open(os.path.join(run_dir, "eval.jsonl"), "w") as f:
            for row in evals:
                f.write(json.dumps(row) + "\n")


def mean(xs):
    return sum(xs) / len(xs)


def sample_std(xs):
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def run_report(args):
    return subprocess.run([sys.executable, REPORT] + args, capture_output=True, text=True)


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        runs_root = os.path.join(tmp, "runs")
        for (codec, workers), seeds in RUNS.items():
            for seed, values in seeds.items():
                write_run(runs_root, codec, workers, seed, values, distributed=(workers == 4 and seed == 2))
        out = os.path.join(tmp, "report")
        p = run_report([runs_root, "--out", out, "--title", "synthetic"])
        if p.returncode != 0:
            print("FAIL: tg_report.py exited", p.returncode, p.stdout, p.stderr)
            return 1

        with open(os.path.join(out, "results.csv")) as f:
            rows = list(csv.DictReader(f))
        check(len(rows) == 4, f"{len(rows)} CSV rows, expected 4")
        for row in rows:
            codec, workers = row["codec"], int(row["workers"])
            seeds = RUNS[(codec, workers)]
            top1 = [v[0] for v in seeds.values()]
            top5 = [v[1] for v in seeds.values()]
            ema = [v[2] for v in seeds.values()]
            where = f"{codec} w{workers}"
            check(row["experiment"] == "synthetic-lenet", f"{where}: experiment {row['experiment']!r}")
            check(row["dataset"] == "fabricated", f"{where}: dataset {row['dataset']!r}")
            check(row["num_seeds"] == "2" and row["seeds"] == "1 2", f"{where}: seeds {row['seeds']!r}")
            expect = {
                "top1_mean_pct": 100 * mean(top1), "top1_std_pct": 100 * sample_std(top1),
                "top5_mean_pct": 100 * mean(top5), "top5_std_pct": 100 * sample_std(top5),
                "ema_top1_mean_pct": 100 * mean(ema), "ema_top1_std_pct": 100 * sample_std(ema),
                "bytes_sent_per_worker_step": SENT[codec],
                "bytes_recv_per_worker_step": 3 * SENT[codec],
                "compression_ratio": FP32_BYTES / SENT[codec],
                "wall_seconds_mean": mean([v[3] for v in seeds.values()]),
                "examples_per_sec_mean": mean([v[4] for v in seeds.values()]),
            }
            if codec == "fp32":
                check(row["delta_top1_vs_fp32_points"] == "", f"{where}: fp32 has a delta")
            else:
                fp32_top1 = [v[0] for v in RUNS[("fp32", workers)].values()]
                expect["delta_top1_vs_fp32_points"] = 100 * (mean(top1) - mean(fp32_top1))
                expect["delta_top1_std_points"] = 100 * sample_std(top1)
            for key, value in expect.items():
                got = float(row[key])
                check(close(got, value), f"{where}: {key} = {got}, expected {value}")

        # Hand-checked anchors, so a shared mistake in the formulas above shows.
        tg2 = next(r for r in rows if r["codec"] == "terngrad" and r["workers"] == "2")
        check(close(float(tg2["top1_mean_pct"]), 89.5), "terngrad w2 mean != 89.5")
        check(close(float(tg2["top1_std_pct"]), 100 * 0.01 / math.sqrt(2)), "terngrad w2 std != 0.7071")
        check(close(float(tg2["delta_top1_vs_fp32_points"]), -1.5), "terngrad w2 delta != -1.5")

        pngs = sorted(n for n in os.listdir(out) if n.endswith(".png"))
        expected_pngs = ["curves_synthetic-lenet_fabricated_s100_w2.png",
                         "curves_synthetic-lenet_fabricated_s100_w4.png", "summary_top1_vs_bytes.png",
                         "summary_top1_vs_workers.png"]
        check(pngs == expected_pngs, f"PNGs {pngs}, expected {expected_pngs}")
        for name in pngs:
            with open(os.path.join(out, name), "rb") as f:
                check(f.read(8) == b"\x89PNG\r\n\x1a\n", f"{name} is not a PNG")
        with open(os.path.join(out, "results.md")) as f:
            md = f.read()
        for name in pngs:
            check(f"]({name})" in md, f"results.md does not embed {name}")
        check("Generated " in md and runs_root in md, "results.md header lacks date or run dirs")
        check("n/a" not in md.split("## Final")[0].split("|---|")[1], "two-seed groups show n/a")
        check(not [n for n in os.listdir(out) if n.endswith(".tmp")], "temporary files left in OUT_DIR")
        check("--codec=auto" not in md, "an auto section without auto runs")

        # --codec=auto: a run's choice (result.json "codec_choice") gets its own table.
        auto_root = os.path.join(tmp, "auto")
        write_run(auto_root, "fp32", 2, 1, RUNS[("fp32", 2)][1], distributed=False)
        auto_result = os.path.join(auto_root, "synthetic-fp32-w2", "seed1", "result.json")
        with open(auto_result) as f:
            result = json.load(f)
        result["codecs"] = "ef(server_ef(terngrad:round=nearest)) on 8 of 8 variables"
        result["codec_choice"] = {"link": {"source": "--auto_link_rate=1gbit"}, "estimate": {"total_ms": 8.03}}
        result["codec_changes"] = [{"step": 40, "variables": [{"name": "fc3/weights", "codec": "fp16"}],
                                    "link": {"up_bytes_per_s": 1.25e10}}]
        with open(auto_result, "w") as f:
            json.dump(result, f)
        p = run_report([auto_root, "--out", os.path.join(tmp, "auto_report")])
        check(p.returncode == 0, f"auto run: {p.returncode} {p.stderr!r}")
        if p.returncode == 0:
            with open(os.path.join(tmp, "auto_report", "results.md")) as f:
                auto_md = f.read()
            check("## Codecs chosen by --codec=auto" in auto_md and "--auto_link_rate=1gbit" in auto_md and
                  "on 8 of 8 variables" in auto_md and "8.0 ms" in auto_md and
                  "step 40: fp16 on 1 (100000 Mbit/s up)" in auto_md, f"auto table: {auto_md}")

        # Emulated links: the same grid at two link rates gives a group per
        # rate (not 4 "seeds"), each terngrad group against fp32 at its rate.
        links_root = os.path.join(tmp, "links")
        for link in ("100mbit", "1gbit"):
            for (codec, workers), seeds in RUNS.items():
                if workers != 2:
                    continue
                for seed, values in seeds.items():
                    write_run(os.path.join(links_root, link), codec, workers, seed, values, distributed=False)
                    meta_path = os.path.join(links_root, link, f"synthetic-{codec}-w{workers}", f"seed{seed}",
                                             "run.json")
                    with open(meta_path) as f:
                        meta = json.load(f)
                    meta.update({"link_rate": link, "ps_link_rate": link})
                    with open(meta_path, "w") as f:
                        json.dump(meta, f)
        p = run_report([links_root, "--out", os.path.join(tmp, "links_report")])
        check(p.returncode == 0, f"link-rate runs: {p.returncode} {p.stderr!r}")
        if p.returncode == 0:
            with open(os.path.join(tmp, "links_report", "results.csv")) as f:
                link_rows = list(csv.DictReader(f))
            check(sorted((r["experiment"], r["codec"], r["num_seeds"]) for r in link_rows) ==
                  [("synthetic-lenet @ 100mbit", "fp32", "2"), ("synthetic-lenet @ 100mbit", "terngrad", "2"),
                   ("synthetic-lenet @ 1gbit", "fp32", "2"), ("synthetic-lenet @ 1gbit", "terngrad", "2")],
                  f"link-rate groups: {[(r['experiment'], r['codec'], r['num_seeds']) for r in link_rows]}")
            check(all(r["delta_top1_vs_fp32_points"] != "" for r in link_rows if r["codec"] == "terngrad"),
                  "terngrad at a link rate has no fp32 baseline at that rate")

        # A codec grid names each config apart ("...-terngrad-extra"): --experiment
        # makes them one comparison, every codec against the fp32 runs.
        for codec in ("fp32", "terngrad"):
            for seed in (1, 2):
                meta_path = os.path.join(runs_root, f"synthetic-{codec}-w2", f"seed{seed}", "run.json")
                with open(meta_path) as f:
                    meta = json.load(f)
                meta["experiment"] += "-extra" if codec == "terngrad" else ""
                with open(meta_path, "w") as f:
                    json.dump(meta, f)
        p = run_report([runs_root, "--out", os.path.join(tmp, "grid_report"), "--experiment", "grid"])
        check(p.returncode == 0, f"--experiment: {p.returncode} {p.stderr!r}")
        if p.returncode == 0:
            with open(os.path.join(tmp, "grid_report", "results.csv")) as f:
                grid_rows = list(csv.DictReader(f))
            check({r["experiment"] for r in grid_rows} == {"grid"}, "--experiment did not name every group")
            check(all(r["delta_top1_vs_fp32_points"] != "" for r in grid_rows if r["codec"] == "terngrad"),
                  "--experiment: terngrad has no fp32 baseline")

        # Errors: nothing found; a malformed result.json named, outputs untouched.
        empty = os.path.join(tmp, "empty")
        os.makedirs(empty)
        p = run_report([empty, "--out", os.path.join(tmp, "r2")])
        check(p.returncode != 0 and "no run directories" in p.stderr, f"empty input: {p.returncode} {p.stderr!r}")
        check(not os.path.exists(os.path.join(tmp, "r2")), "empty input created OUT_DIR")

        bad = os.path.join(runs_root, "synthetic-fp32-w2", "seed1", "result.json")
        with open(bad, "w") as f:
            f.write('{"top1": 0.9,')
        before = {n: os.path.getmtime(os.path.join(out, n)) for n in os.listdir(out)}
        p = run_report([runs_root, "--out", out])
        check(p.returncode != 0 and bad in p.stderr and "malformed result.json" in p.stderr,
              f"malformed result.json: {p.returncode} {p.stderr!r}")
        after = {n: os.path.getmtime(os.path.join(out, n)) for n in os.listdir(out)}
        check(before == after, "a failed run changed OUT_DIR")

    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("tg_report.py: CSV numbers, PNGs and errors as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
