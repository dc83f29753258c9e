#!/usr/bin/env python3
"""Plots each ps's sampled RSS over a ps_load_bench run, with the step ends,
its baseline and its buffer bound (one step's pushes + keep_steps sums, over
the baseline), from the tool's JSON.

usage: plot_rss.py RESULT.json OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    r = json.load(open(sys.argv[1]))
    phases = [p for p in r["phases"] if p["rss_samples"]["t"]]
    fig, axes = plt.subplots(len(phases), 1, figsize=(9, 3.6 * len(phases)), squeeze=False)
    for ax, p in zip(axes[:, 0], phases):
        t = p["rss_samples"]["t"]
        ends, acc = [], t[0]
        for s in p["step_seconds"]:
            acc += s
            ends.append(acc)
        for i, (q, rss) in enumerate(zip(p["ps"], p["rss_samples"]["rss"])):
            line, = ax.plot(t, [x / 2**20 for x in rss], label=f"ps {i} VmRSS", lw=1)
            ax.axhline(q["vm_hwm"] / 2**20, color=line.get_color(), ls=":", lw=0.8,
                       label=f"ps {i} VmHWM {q['vm_hwm'] / 2**20:.0f} MiB")
            if "buffer_bound_bytes" in q:
                ax.axhline((q["baseline_rss"] + q["buffer_bound_bytes"]) / 2**20, color=line.get_color(), ls="--",
                           lw=0.8, label=f"ps {i} baseline + pushes + {r['config']['keep_steps']} kept sums")
        ax.set_title(f"{r['config']['model']}, {r['config']['replicas']} replicas, {r['config']['num_ps']} ps, "
                     f"{p['mode']}: {p['steps']} steps (step ends: ticks at the top)")
        ax.plot(ends, [ax.get_ylim()[1]] * len(ends), "|", color="grey", ms=6)
        ax.set_xlabel("seconds")
        ax.set_ylabel("MiB")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
