#!/usr/bin/env python3
"""Draws a window of a merged timeline (tg-cluster --trace=true: <log_dir>/trace.json)
as a PNG: one row per named thread (main, push sender, sum puller, ...), and
for threads without a name (the ps's gRPC threads, one per call) one row per
kind of span; spans coloured by name, instants as ticks, and the links'
rates (counters) underneath.

  plot_timeline.py TRACE.json OUT.png [--start_s=S] [--span_s=0.3] [--min_span_us=50]

--start_s is seconds after the first event (default: the middle of the run).
"""
import argparse
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--start_s", type=float, default=None)
    ap.add_argument("--span_s", type=float, default=0.3)
    ap.add_argument("--min_span_us", type=float, default=50)
    a = ap.parse_args()
    try:
        with open(a.trace) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"plot_timeline.py: {a.trace}: not a trace file ({e})")
    procs, threads = {}, {}
    for e in events:
        if e.get("ph") == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    timed = [e for e in events if "ts" in e]
    if not timed:
        sys.exit(f"plot_timeline.py: {a.trace} has no timed events")
    t_first = min(e["ts"] for e in timed)
    t_last = max(e["ts"] for e in timed)
    start = t_first + (a.start_s * 1e6 if a.start_s is not None else (t_last - t_first) / 2)
    end = start + a.span_s * 1e6
    def row_of(e):  # (pid, row label)
        named = threads.get((e["pid"], e["tid"]))
        return (e["pid"], f"{named} {e['tid']}" if named else e["name"])

    rows = defaultdict(list)  # (pid, row label) -> [(t0, dur, name)]
    ticks = defaultdict(list)
    counters = defaultdict(list)
    for e in timed:
        ph = e.get("ph")
        if ph == "C":
            if start - 5e3 <= e["ts"] <= end:
                counters[e["name"]].append((e["ts"], e["args"]["value"]))
        elif ph == "X":
            if e["ts"] + e["dur"] >= start and e["ts"] <= end and e["dur"] >= a.min_span_us:
                rows[row_of(e)].append((e["ts"], e["dur"], e["name"]))
        elif ph == "i" and start <= e["ts"] <= end:
            ticks[row_of(e)].append((e["ts"], e["name"]))
    keys = sorted(set(rows) | set(ticks), key=lambda k: (procs.get(k[0], ""), str(k[1])))
    names = sorted({n for r in rows.values() for _, _, n in r})
    cmap = plt.get_cmap("tab20")
    colour = {n: cmap(i % 20) for i, n in enumerate(names)}
    n_counter = len(counters)
    fig, axes = plt.subplots(1 + n_counter, 1, figsize=(18, 0.32 * len(keys) + 1.4 * n_counter + 2), sharex=True,
                             gridspec_kw={"height_ratios": [max(2, 0.32 * len(keys))] + [1.4] * n_counter}, squeeze=False)
    ax = axes[0][0]
    ms = lambda t: (t - start) / 1e3  # noqa: E731
    for y, k in enumerate(keys):
        for t0, dur, n in rows.get(k, []):
            ax.broken_barh([(ms(t0), dur / 1e3)], (y - 0.4, 0.8), facecolors=colour[n], alpha=0.85)
        for t0, n in ticks.get(k, []):
            ax.plot([ms(t0)] * 2, [y - 0.45, y + 0.45], color="k", lw=0.5)
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([f"{procs.get(k[0], k[0])} / {k[1]}" for k in keys], fontsize=7)
    ax.invert_yaxis()
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colour[n]) for n in names], labels=names, fontsize=7,
              ncol=min(5, max(1, len(names))), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    for i, (name, pts) in enumerate(sorted(counters.items())):
        c = axes[i + 1][0]
        pts.sort()
        c.step([ms(t) for t, _ in pts], [v for _, v in pts], where="pre", lw=0.7)
        c.set_ylabel(name, fontsize=7, rotation=0, ha="right")
        c.set_ylim(bottom=0)
    axes[-1][0].set_xlabel(f"ms from {(start - t_first) / 1e6:.3f} s after the first event")
    axes[-1][0].set_xlim(0, a.span_s * 1e3)
    fig.tight_layout()
    fig.savefig(a.out, dpi=80)


if __name__ == "__main__":
    main()
