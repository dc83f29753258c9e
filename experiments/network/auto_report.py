#!/usr/bin/env python3
"""--codec=auto against the fixed candidates, from run_grid.py results (issue 37).

    auto_report.py OUT_DIR RESULTS.json [RESULTS.json ...]

Writes OUT_DIR/README-table.md (one row per net and rate: examples/s of every
codec, auto's share of the best fixed candidate, what auto chose, and the
model's predicted step against the measured one) and OUT_DIR/auto_vs_fixed.png.

The predicted step is the streamed sync step's structure, fed with the
chief's inputs and the run's compute:
    compute + apply + encode + max(up, server, down) + decode + 2 round trips
  - up, down: the ps link's time each way for the chosen plan's bytes (the
    chief's estimate: bytes, R / P replicas per ps link, the probe's rates);
    server: the ps's sums of the R payloads; encode, decode: the replica's
    codec work (the chief's calibration);
  - the ps sums a shard once every replica delivered it, while later shards
    are still on their way up, and sends each sum back as it is done (the
    link is full duplex): upload, sums and download stream shard by shard,
    and the slowest of the three sets the pace;
  - compute (forward and backward) and apply (the optimizer) are the run's
    own, measured: no plan changes them.
A decision written before the estimate had its parts (no "server_ms") is
predicted as up + max(compute + apply, down) + codecs + 2 round trips.
The measured step is the run's steady state (run_grid.py: the later half of
its logged intervals).
The chief's own estimate (communication and codecs only, its 'total_ms') is
what it minimises; it is printed beside.
"""
import json
import os
import sys


def short(spec):
    if spec.startswith("ef(server_ef(terngrad"):
        return "ef-server-ef-nearest"
    return spec.split(":")[0]


def chosen(choice):
    """'ef-server-ef-nearest on 8 of 8' style summary of auto's plan."""
    if not choice or "variables" not in choice:
        return "?"
    counts = {}
    for v in choice["variables"]:
        counts[short(v["codec"])] = counts.get(short(v["codec"]), 0) + 1
    n = len(choice["variables"])
    return ", ".join(f"{c} on {k} of {n}" for c, k in sorted(counts.items(), key=lambda x: -x[1]))


def predicted_step_ms(choice, compute_ms):
    """The predicted step (the module doc), ms; NaN without the chief's decision."""
    est, link = choice.get("estimate"), choice.get("link")
    if not est or not link:
        return float("nan")
    rtt = 2 * link["round_trip_ms"]
    if "server_ms" in est:
        return (compute_ms + est["encode_ms"] + max(est["up_ms"], est["server_ms"], est["down_ms"]) +
                est["decode_ms"] + rtt)
    k = max(1.0, choice["replicas"] / choice["num_ps"])
    up = k * est["up_bytes"] / link["up_bytes_per_s"] * 1e3 if link["up_bytes_per_s"] > 0 else 0.0
    down = k * est["down_bytes"] / link["down_bytes_per_s"] * 1e3 if link["down_bytes_per_s"] > 0 else 0.0
    return up + max(compute_ms, down) + est["codecs_ms"] + rtt


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = sys.argv[1]
    runs, meta = [], None
    for path in sys.argv[2:]:
        d = json.load(open(path))
        meta = meta or d
        runs += [r for r in d["runs"] if r.get("ok")]
    os.makedirs(out, exist_ok=True)
    groups = {}
    for r in runs:
        groups.setdefault((r["net"], r["replicas"], r["rate"]), {})[r["codec"]] = r
    order = {"100mbit": 0, "1gbit": 1, "10gbit": 2, "unshaped": 3}
    keys = sorted(groups, key=lambda k: (k[0], k[1], order.get(k[2], 9)))
    fixed_names = sorted({c for g in groups.values() for c in g if c != "auto"})
    cpu = meta.get("cpu", "?").strip(" \t:")
    lines = [f"Machine: {cpu}, SIMD {meta.get('cpu_simd', '?')}, {meta.get('date', '?')}.", "",
             "| net, replicas | link | " + " | ".join(f"{c} ex/s" for c in fixed_names) +
             " | auto ex/s | auto / best fixed | auto chose | chief's estimate (comm + codecs) | predicted step | measured step | error |",
             "|---|---|" + "---:|" * len(fixed_names) + "---:|---:|---|---:|---:|---:|---:|"]
    plot_rows = []
    for k in keys:
        g = groups[k]
        if "auto" not in g:
            continue
        a = g["auto"]
        best = max((g[c]["examples_per_sec"] for c in fixed_names if c in g), default=float("nan"))
        choice = a.get("codec_choice", {})
        predicted = predicted_step_ms(choice, a["compute_ms"] + a.get("apply_ms", 0.0))
        err = predicted / a["step_ms"] - 1
        def rate(r):
            x = r["examples_per_sec"]
            return f"{x:.2f}" if x < 10 else f"{x:.0f}"
        cells = [rate(g[c]) if c in g else "" for c in fixed_names]
        lines.append(f"| {k[0]}, {k[1]} | {k[2]} | " + " | ".join(cells) +
                     f" | {rate(a)} | **{a['examples_per_sec'] / best:.3f}** | {chosen(choice)} | "
                     f"{choice.get('estimate', {}).get('total_ms', float('nan')):.1f} ms | "
                     f"{predicted:.1f} ms | {a['step_ms']:.1f} ms | {err * 100:+.0f}% |")
        plot_rows.append((f"{k[0]} {k[2]}", {c: g[c]["examples_per_sec"] / best for c in list(fixed_names) + ["auto"]
                                               if c in g}))
    with open(os.path.join(out, "README-table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("auto_report.py: no matplotlib, no plot", file=sys.stderr)
        return
    names = list(fixed_names) + ["auto"]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(names)
    for i, c in enumerate(names):
        xs = [j + i * width for j in range(len(plot_rows))]
        ax.bar(xs, [row.get(c, 0) for _, row in plot_rows], width, label=c)
    ax.axhline(0.95, color="gray", linestyle="--", linewidth=1, label="0.95 (target for auto)")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(plot_rows))])
    ax.set_xticklabels([n for n, _ in plot_rows], rotation=20)
    ax.set_ylabel("examples/s / best fixed codec")
    ax.set_title("--codec=auto against fixed codecs (tg-cluster, tc-shaped links)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "auto_vs_fixed.png"), dpi=120)


if __name__ == "__main__":
    main()
