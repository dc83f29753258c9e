#!/usr/bin/env python3
"""Plot where a ps link idles: tg-cluster's ps_link_timeline.csv (the ps
link's rate each millisecond, each way), a short window of each run given,
one panel per run, so the gaps between steps show.

  experiments/network/link_timeline.py OUT.png LABEL=RUN.csv [LABEL=RUN.csv ...]
      [--start=5.0] [--seconds=0.4] [--rate_mbit=1000]

--start is seconds after the link first carried traffic.
"""
import argparse
import csv
import sys


def read_timeline(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0][0] != "t_s":
        raise SystemExit(f"{path}: not a ps_link_timeline.csv (its header must start with t_s)")
    header, body = rows[0], rows[1:]
    cols = {name: i for i, name in enumerate(header)}
    ins = [c for c in header if c.endswith("_in_mbit")]
    if not ins:
        raise SystemExit(f"{path}: no <link>_in_mbit column")
    link = ins[0][: -len("_in_mbit")]
    try:
        t = [float(r[0]) for r in body]
        rin = [float(r[cols[link + "_in_mbit"]]) for r in body]
        rout = [float(r[cols[link + "_out_mbit"]]) for r in body]
    except (ValueError, IndexError, KeyError) as e:
        raise SystemExit(f"{path}: bad row ({e})")
    return link, t, rin, rout


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("runs", nargs="+", help="LABEL=PATH/ps_link_timeline.csv")
    ap.add_argument("--start", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=0.4)
    ap.add_argument("--rate_mbit", type=float, default=1000.0)
    a = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(a.runs), 1, figsize=(10, 2.4 * len(a.runs)), sharex=True, squeeze=False)
    for ax, run in zip(axes[:, 0], a.runs):
        if "=" not in run:
            raise SystemExit(f"{run}: expected LABEL=PATH")
        label, path = run.split("=", 1)
        link, t, rin, rout = read_timeline(path)
        first = next((x for x, i, o in zip(t, rin, rout) if max(i, o) > 0.5 * a.rate_mbit), t[0] if t else 0)
        lo, hi = first + a.start, first + a.start + a.seconds
        window = [(x - lo, i, o) for x, i, o in zip(t, rin, rout) if lo <= x < hi]
        if not window:
            raise SystemExit(f"{path}: no samples {a.start}-{a.start + a.seconds} s after the link got busy")
        xs = [1e3 * w[0] for w in window]
        ax.fill_between(xs, [w[1] for w in window], step="post", alpha=0.5, label="into the ps (pushes)")
        ax.fill_between(xs, [-w[2] for w in window], step="post", alpha=0.5, label="out of the ps (sums, values)")
        ax.axhline(a.rate_mbit, color="k", lw=0.5, ls="--")
        ax.axhline(-a.rate_mbit, color="k", lw=0.5, ls="--")
        ax.set_ylabel("Mbit/s")
        ax.set_title(f"{label} ({link})", fontsize=9)
        ax.set_ylim(-1.25 * a.rate_mbit, 1.25 * a.rate_mbit)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("ms (1 ms samples of the hub's interface counters)")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(a.out)


if __name__ == "__main__":
    main(sys.argv[1:])
