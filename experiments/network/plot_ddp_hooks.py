#!/usr/bin/env python3
"""One figure and one table from several ddp_netns.py runs: per run (world
size and link rate), each hook's step time relative to PyTorch's all-reduce
and its test top-1.

    python3 experiments/network/plot_ddp_hooks.py experiments/results/ddp/ddp_netns_*.json \
        --out experiments/results/ddp/ddp_hooks
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ddp_netns import LABELS, MODES  # noqa: E402  (the names the runs use)


def load(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        c = doc["config"]
        runs.append({"path": p, "world": c["world_size"], "rate": c["rate"], "rate_bps": c["rate_bps"],
                     "modes": {m["mode"]: m for m in doc["modes"]}, "doc": doc})
    return sorted(runs, key=lambda r: (r["world"], r["rate_bps"]))


def table(runs):
    lines = ["| hook | " + " | ".join("W=%d, %s" % (r["world"], r["rate"]) for r in runs) + " |",
             "|---|" + "---:|" * len(runs)]
    for mode in MODES:
        cells = []
        for r in runs:
            m, base = r["modes"].get(mode), r["modes"].get("allreduce")
            if m is None:
                cells.append("")
            elif "error" in m:
                cells.append("failed")
            else:
                cells.append("%.0f ms (%.2fx), %.2f%%, %.2f bits" % (
                    1e3 * m["step_median_s"], m["step_median_s"] / base["step_median_s"], 100 * (m["test_top1"] or 0),
                    m["rank0_rx_bits_per_element"]))
        if any(cells):
            lines.append("| %s | %s |" % (LABELS[mode], " | ".join(cells)))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="ddp_netns.py JSON files")
    ap.add_argument("--out", required=True, help="output stem: <stem>.md and <stem>.png")
    args = ap.parse_args()
    runs = load(args.runs)
    with open(args.out + ".md", "w") as f:
        f.write("Step median (ratio to all-reduce's), test top-1 after the same steps, bits received per "
                "parameter on rank 0's link, per run:\n\n" + table(runs) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    modes = [m for m in MODES if any(m in r["modes"] and "error" not in r["modes"][m] for r in runs)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        xs = [j + (i - (len(modes) - 1) / 2) * width for j in range(len(runs))]
        ratio = [r["modes"][mode]["step_median_s"] / r["modes"]["allreduce"]["step_median_s"]
                 if mode in r["modes"] and "error" not in r["modes"][mode] else 0 for r in runs]
        top1 = [100 * (r["modes"][mode]["test_top1"] or 0)
                if mode in r["modes"] and "error" not in r["modes"][mode] else 0 for r in runs]
        axes[0].bar(xs, ratio, width, label=LABELS[mode].replace("`", ""))
        axes[1].bar(xs, top1, width)
    names = ["W=%d\n%s" % (r["world"], r["rate"]) for r in runs]
    for ax in axes:
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels(names)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].axhline(1.0, color="black", linewidth=0.8)
    axes[0].axhline(0.6, color="gray", linestyle="--", linewidth=0.8)
    axes[0].set_ylabel("step time / all-reduce's (median)")
    axes[1].set_ylabel("test top-1 (%) after the same steps")
    lows = [100 * m["test_top1"] for r in runs for m in r["modes"].values() if "error" not in m and m["test_top1"]]
    if lows:
        axes[1].set_ylim(max(0, min(lows) - 3), min(100, max(lows) + 2))
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("PyTorch DDP hooks over tbf-shaped links (gloo, Fashion-MNIST MLP)")
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=110)
    print(open(args.out + ".md").read())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
