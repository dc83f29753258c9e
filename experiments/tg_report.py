#!/usr/bin/env python3
"""Results report over training run directories: a table and plots.

    python3 experiments/tg_report.py RUN_DIR_OR_PARENT... --out OUT_DIR [--title T] [--experiment NAME]

A run directory is any directory holding result.json (searched recursively
under each argument); metrics.jsonl / eval.jsonl next to it give the curves,
run.json (written by the experiment driver) names the experiment, codec,
worker count, seed and dataset. Without run.json these come from result.json:
codec "fp32" when grad_bits is 32, else "terngrad"; workers = num_nodes.

Runs are grouped by (experiment base, dataset, workers, codec, steps); the
seeds of a group are averaged. --experiment NAME makes every run's experiment
NAME: a grid of configs that differ only in their codec (paper_configs/codecs/)
is one comparison, each codec against the fp32 runs. Writes OUT_DIR/results.md, results.csv and PNG
plots. Every output is written to a temporary file and renamed into place, and
nothing is written until every input has been read, so a failure leaves the
previous report intact.
"""
import argparse
import csv
import datetime
import io
import json
import math
import os
import platform
import re
import statistics
import sys
import tempfile
import textwrap

import numpy as np


class ReportError(Exception):
    """A problem with the inputs, reported as one line without a traceback."""


# ---------------------------------------------------------------- inputs


def read_json_object(path):
    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        raise ReportError(f"{path}: malformed {os.path.basename(path)}: {e}")
    if not isinstance(value, dict):
        raise ReportError(f"{path}: malformed {os.path.basename(path)}: not a JSON object")
    return value


def read_jsonl(path):
    """The JSON objects of a JSONL file; a bad line is an error naming file and line."""
    rows = []
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise ReportError(f"{path}:{line_no}: malformed line: {e}")
            if not isinstance(row, dict):
                raise ReportError(f"{path}:{line_no}: not a JSON object")
            rows.append(row)
    return rows


def number(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ReportError(f"{what} is {value!r}, expected a number")
    return float(value)


def experiment_base(experiment, codec, workers):
    """The experiment name without tokens naming the codec or the worker count.

    A driver may name runs like "lenet-fmnist-terngrad-w4"; the fp32 baseline
    of such a run is the one whose name differs only in those tokens.
    """
    drop = {codec.lower(), f"w{workers}", f"{workers}w", f"workers{workers}", f"{workers}workers"}
    tokens = [t for t in re.split(r"[-_]", experiment) if t and t.lower() not in drop]
    return "-".join(tokens) or experiment


class Run:
    def __init__(self, run_dir, experiment_name=None):
        self.dir = run_dir
        result_path = os.path.join(run_dir, "result.json")
        result = read_json_object(result_path)
        run_path = os.path.join(run_dir, "run.json")
        meta = read_json_object(run_path) if os.path.exists(run_path) else {}

        def field(source, path, key, required=True):
            if key not in source or source[key] is None:
                if required:
                    raise ReportError(f"{path}: missing \"{key}\"")
                return None
            return number(source[key], f"{path}: \"{key}\"")

        self.top1 = field(result, result_path, "top1")
        self.top5 = field(result, result_path, "top5", required=False)
        self.ema_top1 = field(result, result_path, "ema_top1", required=False)
        self.bytes_sent = field(result, result_path, "bytes_sent_per_worker_step", required=False)
        self.bytes_recv = field(result, result_path, "bytes_recv_per_worker_step", required=False)
        self.fp32_bytes = field(result, result_path, "fp32_bytes_per_worker_step", required=False)
        self.wall_seconds = field(result, result_path, "wall_seconds", required=False)
        self.examples_per_sec = field(result, result_path, "examples_per_sec", required=False)
        steps = field(result, result_path, "steps", required=False)
        self.steps = int(steps) if steps is not None else None
        # --codec=auto: what the run chose (its codecs' summary) and the estimate it chose by.
        choice = result.get("codec_choice")
        self.codec_choice = choice if isinstance(choice, dict) else None
        changes = result.get("codec_changes")  # plans chosen again when the link moved
        self.codec_changes = [c for c in changes if isinstance(c, dict)] if isinstance(changes, list) else []
        self.codecs_used = str(result.get("codecs", ""))

        paper = meta.get("paper_top1")  # what the paper reports for this config, if it says
        self.paper_top1 = number(paper, f"{run_path}: \"paper_top1\"") if paper is not None else None
        self.net = str(meta.get("net", result.get("net", "?")))
        self.dataset = str(meta.get("dataset", "n/a"))
        if "codec" in meta:
            self.codec = str(meta["codec"])
        else:
            bits = field(result, result_path, "grad_bits")
            self.codec = "fp32" if bits == 32 else "terngrad"
        workers = meta["workers"] if "workers" in meta else result.get("num_nodes")
        self.workers = int(number(workers, f"{run_path if 'workers' in meta else result_path}: workers"))
        seed = meta.get("seed", result.get("seed"))
        self.seed = int(number(seed, f"{run_dir}: seed")) if seed is not None else None
        experiment = meta.get("experiment")
        if experiment_name:
            self.base = experiment_name
        else:
            self.base = experiment_base(str(experiment), self.codec, self.workers) if experiment else self.net
        # Emulated links (tg-experiment --link_rates): runs at different rates
        # are different experiments, never seeds of one, and terngrad pairs
        # with the fp32 baseline at the same rate.
        link = meta.get("link_rate")
        if link:
            ps_link = meta.get("ps_link_rate")
            self.base += f" @ {link}" + (f" (ps {ps_link})" if ps_link and ps_link != link else "")

        self._read_curves()

    def _read_curves(self):
        """Eval and train curves; distributed runs put eval lines in eval.jsonl."""
        evals, train = {}, {}
        for name in ("metrics.jsonl", "eval.jsonl"):
            path = os.path.join(self.dir, name)
            if not os.path.exists(path):
                continue
            for row in read_jsonl(path):
                step = row.get("step")
                if not isinstance(step, int):
                    continue
                if row.get("event") == "eval" and isinstance(row.get("top1"), (int, float)):
                    evals[step] = float(row["top1"])
                elif row.get("event") == "train":
                    train[step] = row
        self.eval_steps = np.array(sorted(evals), dtype=float)
        self.eval_top1 = np.array([evals[s] for s in sorted(evals)], dtype=float)
        steps = sorted(s for s in train if isinstance(train[s].get("loss"), (int, float)))
        self.loss_steps = np.array(steps, dtype=float)
        self.loss = np.array([train[s]["loss"] for s in steps], dtype=float)

        # Cumulative bytes sent: each train line reports the per-step bytes of
        # the steps since the previous line.
        sent_steps = sorted(s for s in train if isinstance(train[s].get("bytes_sent_per_worker"), (int, float)))
        cumulative, previous, total = [], 0, 0.0
        for s in sent_steps:
            total += train[s]["bytes_sent_per_worker"] * (s - previous)
            previous = s
            cumulative.append(total)
        self.bytes_steps = np.array(sent_steps, dtype=float)
        self.bytes_cumulative = np.array(cumulative, dtype=float)

    def cumulative_bytes_at(self, steps):
        if len(self.bytes_steps):
            return np.interp(steps, np.concatenate(([0.0], self.bytes_steps)),
                             np.concatenate(([0.0], self.bytes_cumulative)))
        if self.bytes_sent is not None:
            return steps * self.bytes_sent
        return None


def find_run_dirs(paths):
    found = []
    for path in paths:
        if not os.path.isdir(path):
            raise ReportError(f"{path}: not a directory")
        for root, dirs, files in os.walk(path):
            dirs.sort()
            if "result.json" in files:
                found.append(os.path.normpath(root))
    if not found:
        raise ReportError("no run directories (directories with result.json) under " + ", ".join(paths))
    return sorted(set(found))


# ---------------------------------------------------------------- grouping and statistics


def codec_order(codec):
    return (codec != "fp32", codec)


class Group:
    def __init__(self, key, runs):
        self.base, self.dataset, self.workers, self.codec, self.steps = key
        self.runs = sorted(runs, key=lambda r: (r.seed is None, r.seed or 0, r.dir))
        self.seeds = [r.seed for r in self.runs]

    @staticmethod
    def key_of(run):
        return (run.base, run.dataset, run.workers, run.codec, run.steps)

    def sort_key(self):
        return (self.base, self.dataset, self.steps or 0, self.workers, codec_order(self.codec))

    def values(self, attr):
        return [getattr(r, attr) for r in self.runs if getattr(r, attr) is not None]

    def mean(self, attr):
        v = self.values(attr)
        return statistics.mean(v) if v else None

    def std(self, attr):
        """Sample standard deviation over seeds; None for fewer than two."""
        v = self.values(attr)
        return statistics.stdev(v) if len(v) >= 2 else None

    def compression(self):
        ratios = [r.fp32_bytes / r.bytes_sent for r in self.runs if r.fp32_bytes and r.bytes_sent]
        return statistics.mean(ratios) if ratios else None


def group_runs(runs):
    by_key = {}
    for run in runs:
        by_key.setdefault(Group.key_of(run), []).append(run)
    groups = sorted((Group(k, v) for k, v in by_key.items()), key=Group.sort_key)
    for g in groups:
        seeds = [s for s in g.seeds if s is not None]
        if len(seeds) != len(set(seeds)):
            print(f"tg_report: warning: {g.base} {g.codec} workers={g.workers} has repeated seeds {seeds}",
                  file=sys.stderr)
    return groups


def fp32_baseline(group, groups):
    for g in groups:
        if (g.codec == "fp32" and (g.base, g.dataset, g.workers, g.steps) ==
                (group.base, group.dataset, group.workers, group.steps)):
            return g
    return None


def table_rows(groups):
    """One dict per group; accuracies in percent, the difference in points."""
    rows = []
    for g in groups:
        pct = lambda v: None if v is None else 100.0 * v
        base = fp32_baseline(g, groups)
        delta = None
        if base is not None and g is not base:
            delta = 100.0 * (g.mean("top1") - base.mean("top1"))
        rows.append({
            "experiment": g.base,
            "dataset": g.dataset,
            "workers": g.workers,
            "codec": g.codec,
            "steps": g.steps,
            "num_seeds": len(g.runs),
            "seeds": " ".join(str(s) for s in g.seeds),
            "top1_mean_pct": pct(g.mean("top1")),
            "top1_std_pct": pct(g.std("top1")),
            "top5_mean_pct": pct(g.mean("top5")),
            "top5_std_pct": pct(g.std("top5")),
            "ema_top1_mean_pct": pct(g.mean("ema_top1")),
            "ema_top1_std_pct": pct(g.std("ema_top1")),
            "paper_top1_pct": pct(next((r.paper_top1 for r in g.runs if r.paper_top1 is not None), None)),
            "delta_top1_vs_fp32_points": delta,
            "delta_top1_std_points": pct(g.std("top1")) if delta is not None else None,
            "bytes_sent_per_worker_step": g.mean("bytes_sent"),
            "bytes_recv_per_worker_step": g.mean("bytes_recv"),
            "compression_ratio": g.compression(),
            "wall_seconds_mean": g.mean("wall_seconds"),
            "examples_per_sec_mean": g.mean("examples_per_sec"),
        })
    return rows


# ---------------------------------------------------------------- plots


def slug(text):
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("_") or "run"


def mean_band(curves):
    """Mean, min and max over seeds at the x positions all curves share."""
    common = set(curves[0][0].tolist())
    for x, _ in curves[1:]:
        common &= set(x.tolist())
    xs = np.array(sorted(common))
    if not len(xs):
        return None
    ys = np.array([[y[np.searchsorted(x, v)] for v in xs] for x, y in curves])
    return xs, ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0)


def moving_average(y, window):
    if window <= 1 or len(y) < window:
        return y
    return np.convolve(y, np.ones(window) / window, mode="valid")


def render_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def curve_figure(plt, groups, title):
    """Top-1 vs steps, top-1 vs cumulative bytes sent (log x), smoothed loss vs steps."""
    fig, (ax_step, ax_bytes, ax_loss) = plt.subplots(1, 3, figsize=(16, 4.6))
    for g in sorted(groups, key=lambda g: codec_order(g.codec)):
        label = f"{g.codec} ({len(g.runs)} seed{'s' if len(g.runs) != 1 else ''})"
        evals = [(r.eval_steps, r.eval_top1) for r in g.runs if len(r.eval_steps)]
        if evals and len(evals) == len(g.runs):
            band = mean_band(evals)
            if band is not None:
                xs, mean, lo, hi = band
                line, = ax_step.plot(xs, 100 * mean, marker="o", ms=3, label=label)
                ax_step.fill_between(xs, 100 * lo, 100 * hi, color=line.get_color(), alpha=0.2)
                sent = [r.cumulative_bytes_at(xs) for r in g.runs]
                if all(s is not None for s in sent):
                    bx = np.mean(sent, axis=0)
                    keep = bx > 0  # log axis
                    ax_bytes.plot(bx[keep], 100 * mean[keep], marker="o", ms=3, color=line.get_color(), label=label)
                    ax_bytes.fill_between(bx[keep], 100 * lo[keep], 100 * hi[keep], color=line.get_color(), alpha=0.2)
        losses = [(r.loss_steps, r.loss) for r in g.runs if len(r.loss_steps)]
        if losses and len(losses) == len(g.runs):
            band = mean_band(losses)
            if band is not None:
                xs, mean, lo, hi = band
                # About 50 points per window: per-step loss of a small batch is noisy.
                window = max(1, len(xs) // 50)
                sx = moving_average(xs, window)
                line, = ax_loss.plot(sx, moving_average(mean, window), label=label)
                ax_loss.fill_between(sx, moving_average(lo, window), moving_average(hi, window),
                                     color=line.get_color(), alpha=0.2)
    ax_step.set(xlabel="step", ylabel="test top-1 (%)", title="test top-1 vs steps")
    ax_bytes.set(xlabel="cumulative bytes sent per worker", ylabel="test top-1 (%)",
                 title="test top-1 vs bytes sent")
    ax_bytes.set_xscale("log")
    ax_loss.set(xlabel="step", ylabel="training loss (moving average)", title="training loss")
    for ax in (ax_step, ax_bytes, ax_loss):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(title + "  (mean over seeds, band: min-max)")
    fig.tight_layout()
    png = render_png(fig)
    plt.close(fig)
    return png


def summary_figure(plt, groups, title):
    """Final top-1 against workers per (experiment, codec), error bars = sample std."""
    fig, ax = plt.subplots(figsize=(7, 4.6))
    series = {}
    for g in groups:
        series.setdefault((g.base, g.dataset, g.steps, g.codec), []).append(g)
    bases = {k[:3] for k in series}
    for key in sorted(series, key=lambda k: (k[:3], codec_order(k[3]))):
        gs = sorted(series[key], key=lambda g: g.workers)
        label = key[3] if len(bases) == 1 else f"{key[0]} {key[3]}"
        ax.errorbar([g.workers for g in gs], [100 * g.mean("top1") for g in gs],
                    yerr=[100 * (g.std("top1") or 0.0) for g in gs], marker="o", capsize=4, label=label)
    # Long titles wrap rather than run off the figure.
    ax.set(xlabel="workers", ylabel="final test top-1 (%)")
    ax.set_title(textwrap.fill(title + ": final top-1 vs workers", 70), fontsize=10)
    ax.set_xticks(sorted({g.workers for g in groups}))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = render_png(fig)
    plt.close(fig)
    return png


def bytes_figure(plt, groups, title):
    """Final top-1 against bytes per worker per step, both directions (log
    scale), one marker per group, error bars = sample std; None when no group
    knows both byte counts."""
    points = [g for g in groups if g.mean("bytes_sent") is not None and g.mean("bytes_recv") is not None]
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(8, 5.2))
    markers = "osD^v<>pP*Xh"
    codecs = sorted({g.codec for g in points}, key=codec_order)
    for i, codec in enumerate(codecs):
        gs = sorted((g for g in points if g.codec == codec), key=lambda g: g.workers)
        ax.errorbar([g.mean("bytes_sent") + g.mean("bytes_recv") for g in gs], [100 * g.mean("top1") for g in gs],
                    yerr=[100 * (g.std("top1") or 0.0) for g in gs], marker=markers[i % len(markers)],
                    linestyle="none", capsize=3, label=codec)
        for g in gs:
            ax.annotate(f"w{g.workers}", (g.mean("bytes_sent") + g.mean("bytes_recv"), 100 * g.mean("top1")),
                        fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set(xlabel="bytes per worker per step, sent + received (log)", ylabel="final test top-1 (%)")
    ax.set_title(textwrap.fill(title + ": final top-1 vs bytes", 70), fontsize=10)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    png = render_png(fig)
    plt.close(fig)
    return png


# ---------------------------------------------------------------- outputs


CSV_COLUMNS = ["experiment", "dataset", "workers", "codec", "steps", "num_seeds", "seeds",
               "top1_mean_pct", "top1_std_pct", "top5_mean_pct", "top5_std_pct",
               "ema_top1_mean_pct", "ema_top1_std_pct", "paper_top1_pct",
               "delta_top1_vs_fp32_points", "delta_top1_std_points",
               "bytes_sent_per_worker_step", "bytes_recv_per_worker_step", "compression_ratio", "wall_seconds_mean", "examples_per_sec_mean"]


def csv_text(rows):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        # repr keeps every digit, so the CSV reads back to the same doubles.
        writer.writerow(["" if row[c] is None else repr(row[c]) if isinstance(row[c], float) else row[c]
                         for c in CSV_COLUMNS])
    return out.getvalue()


def fmt(v, digits=2):
    return "n/a" if v is None else f"{v:.{digits}f}"


def mean_std(mean, std, digits=2):
    if mean is None:
        return "n/a"
    return f"{mean:.{digits}f} ± {fmt(std, digits)}"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def auto_lines(runs):
    """A table of what --codec=auto chose in each run that used it ([] when none did)."""
    chosen = [r for r in runs if r.codec_choice]
    if not chosen:
        return []
    lines = ["## Codecs chosen by --codec=auto", "",
             "| run | link the choice assumed | codecs chosen | estimated communication + codecs per step "
             "| chosen again (step: codecs, link) |",
             "|---|---|---|---:|---|"]
    for r in sorted(chosen, key=lambda r: r.dir):
        c = r.codec_choice
        if c.get("resumed_from_checkpoint"):
            link, estimate = "(the checkpoint's plan)", "n/a"
        else:
            link = str(c.get("link", {}).get("source", "?"))
            total = c.get("estimate", {}).get("total_ms")
            estimate = "n/a" if not isinstance(total, (int, float)) else f"{total:.1f} ms"
        again = "; ".join(change_text(c) for c in r.codec_changes) or "no"
        lines.append(f"| `{r.dir}` | {link} | {r.codecs_used or '?'} | {estimate} | {again} |")
    return lines + [""]


def change_text(change):
    """One plan chosen again (result.json codec_changes): its step, codecs and the link it assumed."""
    codecs = {}
    for v in change.get("variables", []):
        if isinstance(v, dict):
            codecs[str(v.get("codec", "?"))] = codecs.get(str(v.get("codec", "?")), 0) + 1
    named = ", ".join(f"{c} on {n}" for c, n in codecs.items()) or "?"
    up = change.get("link", {}).get("up_bytes_per_s") if isinstance(change.get("link"), dict) else None
    rate = f"{up * 8 / 1e6:.0f} Mbit/s up" if isinstance(up, (int, float)) and up > 0 else "?"
    return f"step {change.get('step', '?')}: {named} ({rate})"


def markdown_text(title, rows, run_dirs, curve_pngs, summary_png, bytes_png, runs=()):
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines = [f"# {title}", "",
             f"Generated {now} on host `{platform.node()}` ({cpu_model()}) by experiments/tg_report.py "
             f"from {len(run_dirs)} run director{'y' if len(run_dirs) == 1 else 'ies'}:", ""]
    lines += [f"- `{d}`" for d in run_dirs]
    lines += ["",
              "Accuracies in percent, mean ± sample standard deviation over seeds (n/a for one seed). "
              "Δ top-1 is the group's mean minus the fp32 group's mean with the same experiment, dataset, "
              "workers and steps, in points, ± the group's own std. Compression = fp32 bytes / bytes sent "
              "per worker per step.", "",
              "| experiment | dataset | workers | codec | steps | seeds | top-1 | top-5 | EMA top-1 | paper top-1 "
              "| Δ top-1 vs fp32 | bytes sent/worker/step | bytes received/worker/step | compression | wall s | examples/s |",
              "|---|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        delta = ("—" if r["codec"] == "fp32" else "n/a (no fp32 group)") if r["delta_top1_vs_fp32_points"] is None \
            else f"{r['delta_top1_vs_fp32_points']:+.2f} ± {fmt(r['delta_top1_std_points'])}"
        lines.append("| " + " | ".join([
            r["experiment"], r["dataset"], str(r["workers"]), r["codec"],
            "n/a" if r["steps"] is None else str(r["steps"]),
            f"{r['num_seeds']} ({r['seeds'] or 'n/a'})",
            mean_std(r["top1_mean_pct"], r["top1_std_pct"]),
            mean_std(r["top5_mean_pct"], r["top5_std_pct"]),
            mean_std(r["ema_top1_mean_pct"], r["ema_top1_std_pct"]),
            fmt(r["paper_top1_pct"]),
            delta,
            "n/a" if r["bytes_sent_per_worker_step"] is None else f"{r['bytes_sent_per_worker_step']:,.0f}",
            "n/a" if r["bytes_recv_per_worker_step"] is None else f"{r['bytes_recv_per_worker_step']:,.0f}",
            "n/a" if r["compression_ratio"] is None else f"{r['compression_ratio']:.2f}x",
            fmt(r["wall_seconds_mean"], 1), fmt(r["examples_per_sec_mean"], 0),
        ]) + " |")
    lines += [""] + auto_lines(runs)
    lines += ["## Final top-1 vs workers", "", f"![final top-1 vs workers]({summary_png})", ""]
    if bytes_png:
        lines += ["## Final top-1 vs bytes per worker per step (sent + received)", "",
                  f"![final top-1 vs bytes]({bytes_png})", ""]
    lines += ["## Curves", ""]
    for caption, name in curve_pngs:
        lines += [f"### {caption}", "", f"![{caption}]({name})", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_atomically(out_dir, name, data):
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        os.replace(tmp, os.path.join(out_dir, name))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", metavar="RUN_DIR_OR_PARENT")
    parser.add_argument("--out", required=True, metavar="OUT_DIR")
    parser.add_argument("--title", default="TernGrad results")
    parser.add_argument("--experiment", default=None, metavar="NAME",
                        help="every run is of this one experiment (a codec grid: each codec against its fp32 runs)")
    args = parser.parse_args(argv)

    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"tg_report: matplotlib is required ({e}); on Debian: apt-get install python3-matplotlib",
              file=sys.stderr)
        return 2

    try:
        run_dirs = find_run_dirs(args.paths)
        runs = [Run(d, args.experiment) for d in run_dirs]
    except ReportError as e:
        print(f"tg_report: {e}", file=sys.stderr)
        return 1
    groups = group_runs(runs)
    rows = table_rows(groups)

    # Render everything in memory first: a failure leaves OUT_DIR as it was.
    pngs = {}
    curve_pngs = []
    panels = {}
    for g in groups:
        panels.setdefault((g.base, g.dataset, g.steps, g.workers), []).append(g)
    for (base, dataset, steps, workers), gs in sorted(panels.items(), key=lambda kv: (kv[0][:3], kv[0][3])):
        caption = f"{base}, {dataset}, {workers} workers" + (f", {steps} steps" if steps else "")
        name = f"curves_{slug(base)}_{slug(dataset)}" + (f"_s{steps}" if steps else "") + f"_w{workers}.png"
        pngs[name] = curve_figure(plt, gs, caption)
        curve_pngs.append((caption, name))
    pngs["summary_top1_vs_workers.png"] = summary_figure(plt, groups, args.title)
    bytes_png = bytes_figure(plt, groups, args.title)
    if bytes_png is not None:
        pngs["summary_top1_vs_bytes.png"] = bytes_png
    markdown = markdown_text(args.title, rows, run_dirs, curve_pngs, "summary_top1_vs_workers.png",
                             "summary_top1_vs_bytes.png" if bytes_png is not None else None, runs)

    os.makedirs(args.out, exist_ok=True)
    for name, data in pngs.items():
        write_atomically(args.out, name, data)
    write_atomically(args.out, "results.csv", csv_text(rows))
    write_atomically(args.out, "results.md", markdown)
    print(f"tg_report: {len(runs)} runs in {len(groups)} groups -> {os.path.join(args.out, 'results.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
