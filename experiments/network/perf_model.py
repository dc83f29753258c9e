#!/usr/bin/env python3
"""Performance model of synchronous data-parallel SGD with parameter servers
(TernGrad, Wen et al. 2017, Sec. "performance model"), its fit to measured
steps, and its evaluation at the paper's cluster settings.

    perf_model.py fit MEASUREMENTS.csv|.jsonl|results.json [--out DIR]  # least-squares fit + residuals
    perf_model.py synth OUT.csv [--efficiency E --overhead S]  # SYNTHETIC rows to try `fit` on
    perf_model.py paper [--out DIR] [--from-fit fit.json]      # curves at the paper's settings

The model (one training step, every worker in lock step):

    t_step = t_fwd + max(t_bwd, overlap * t_comm) + (1 - overlap) * t_comm + t_codec
    t_comm = max over links l of [ max(in_l, out_l) * 8 / (efficiency * rate_l)
                                   + msg_overhead * max(msgs_in_l, msgs_out_l) ]

  - t_fwd + t_bwd = compute time of a step without communication (backward_fraction
    of it is the backward pass, default 2/3); overlap in [0, 1] is the share of
    the communication that may run under the backward pass (0 = none).
  - t_codec: encode + decode on the worker, plus the ps's aggregation when given.
  - Links are full duplex: a link's time is its busier direction.
  - Every worker pushes its payload to the parameter servers (the parameters
    are split evenly over the P servers, so each worker sends payload/P to
    each) and pulls the aggregated payload back. A dedicated ps link carries
    W * payload / P in and W * aggregated / P out per step; a worker node's
    link carries G * payload out and G * aggregated in (G workers per node,
    each pushing its own payload: TernGrad payloads of several workers cannot
    be added into a 2-bit payload). With "colocated" servers (one shard on each
    of the N nodes) a node's link carries G*(N-1)/N*(payload + aggregated)
    each way. With G > 1 the node's PCIe/NVLink uplink is one more link.
  - Messages: one per (worker, ps) pair and direction, so a dedicated ps link
    sees W each way, a colocated node link 2*G*(N-1).
  - Payload sizes are this project's codecs (python: terngrad.Codec(spec).payload_bytes):
    fp32 16 + 4n bytes, fp16 16 + 2n, TernGrad 40 + ceil(n/4); the ps returns
    fp32 for fp32 and fp16 (bench/RESULTS.md, "ps push/pull"), and for TernGrad
    the packed sum of W payloads, 40 + ceil(n * bit_width(2W) / 8) bytes
    (quantize/include/terngrad/quantize/ternary_sum.h: sum_payload_bytes).
  - images/s = W * batch / t_step.

`fit` takes efficiency and msg_overhead as unknowns, everything else from the
measurement rows (columns below), and solves by (weighted) least squares.
"""
import argparse
import csv
import datetime
import json
import math
import os
import platform
import random
import sys

# ---------------------------------------------------------------------------
# Payload sizes (bytes), this project's codecs.

HEADER_BYTES = {"fp32": 16, "fp16": 16, "terngrad": 40}
CODECS = ("fp32", "fp16", "terngrad")


def sum_bits(replicas):
    """Bits per element of the sum of `replicas` ternary payloads: bit_width(2R),
    i.e. ceil(log2(2R + 1)) (ternary_sum.h: sum_bits)."""
    if replicas < 1:
        raise ValueError("replicas must be >= 1, got %r" % replicas)
    return (2 * replicas).bit_length()


def variable_bytes(codec, n, replicas, float_below=0):
    """(push, pull) bytes of one variable of n elements. TernGrad variables
    smaller than float_below elements travel as fp32 (the authors'
    size_to_binarize; 0 = ternarize everything)."""
    if codec == "terngrad" and n < float_below:
        codec = "fp32"
    if codec == "fp32":
        return 16 + 4 * n, 16 + 4 * n
    if codec == "fp16":
        return 16 + 2 * n, 16 + 4 * n  # the ps sums in fp32 and replies fp32
    if codec == "terngrad":
        return 40 + (n + 3) // 4, 40 + (n * sum_bits(replicas) + 7) // 8
    raise ValueError("unknown codec %r (one of %s)" % (codec, ", ".join(CODECS)))


def node_payload_bytes(codec, sizes, gpus, pull_contributions, float_below=0):
    """(push, pull) bytes per node when the node first sums its `gpus` GPUs'
    gradients: fp32/fp16 stay fp32/fp16; TernGrad pushes the packed sum of its
    GPUs' ternary payloads (bit_width(2G) bits an element, the same format as
    the ps's sum) and pulls the ps's sum of pull_contributions ternary terms."""
    push = pull = 0
    for n in sizes:
        if codec == "terngrad" and n >= float_below:
            push += 40 + (n * sum_bits(gpus) + 7) // 8 if gpus > 1 else 40 + (n + 3) // 4
            pull += 40 + (n * sum_bits(pull_contributions) + 7) // 8
        else:
            a, b = variable_bytes(codec, n, 1, float_below)
            push += a
            pull += b
    return push, pull


def payload_bytes(codec, sizes, replicas, float_below=0):
    """(push, pull) bytes per worker per step for variables of the given sizes."""
    push = pull = 0
    for n in sizes:
        a, b = variable_bytes(codec, n, replicas, float_below)
        push += a
        pull += b
    return push, pull


# ---------------------------------------------------------------------------
# Links and step time.

def link_loads(replicas, num_ps, push, pull, gpus_per_node=1, layout="dedicated"):
    """Per-step load of every kind of link: a list of dicts with name, kind
    ("net" or "intra"), bytes_in, bytes_out, msgs_in, msgs_out. Only one link
    of each kind is listed (the busiest; the others carry the same or less)."""
    W, G = int(replicas), int(gpus_per_node)
    if W < 1 or G < 1:
        raise ValueError("replicas and gpus_per_node must be >= 1")
    G = min(G, W)
    nodes = -(-W // G)
    links = []
    if layout == "colocated":
        # One shard per node; a full node's G workers exchange with N-1 remote
        # shards, and the node's shard serves the W-G remote workers.
        if nodes > 1:
            remote = (nodes - 1) / nodes
            each_way = G * remote * push + (W - G) / nodes * pull   # out: pushes + replies
            each_in = G * remote * pull + (W - G) / nodes * push    # in: pulls + received pushes
            msgs = G * (nodes - 1) + (W - G)
            links.append(dict(name="node link (colocated ps)", kind="net", role="worker", bytes_in=each_in,
                              bytes_out=each_way, msgs_in=msgs, msgs_out=msgs))
    elif layout == "dedicated":
        P = int(num_ps)
        if P < 1:
            raise ValueError("num_ps must be >= 1")
        links.append(dict(name="ps link", kind="net", role="ps", bytes_in=W * push / P, bytes_out=W * pull / P,
                          msgs_in=W, msgs_out=W))
        links.append(dict(name="worker node link", kind="net", role="worker", bytes_in=G * pull, bytes_out=G * push,
                          msgs_in=G * P, msgs_out=G * P))
    else:
        raise ValueError("layout must be 'dedicated' or 'colocated', got %r" % layout)
    if G > 1:
        # Every GPU's payload crosses the node's shared uplink (PCIe switch / NVLink) once each way.
        links.append(dict(name="intra-node uplink", kind="intra", bytes_in=G * pull, bytes_out=G * push,
                          msgs_in=0, msgs_out=0))
    return links


def link_terms(link):
    """(seconds at 1 bit/s nominal rate, messages) of a link's busier direction."""
    return max(link["bytes_in"], link["bytes_out"]) * 8.0, max(link["msgs_in"], link["msgs_out"])


def comm_time(links, rate_bps, efficiency, msg_overhead_s, intra_rate_bps=None):
    """Time of the busiest link and that link's name."""
    best, name = 0.0, "none"
    for link in links:
        bits, msgs = link_terms(link)
        if link["kind"] == "intra":
            if not intra_rate_bps:
                continue
            t = bits / intra_rate_bps
        else:
            t = bits / (efficiency * rate_bps) + msg_overhead_s * msgs
        if t > best:
            best, name = t, link["name"]
    return best, name


def step_time(compute_s, codec_s, comm_s, overlap=0.0, backward_fraction=2.0 / 3.0):
    fwd = compute_s * (1.0 - backward_fraction)
    bwd = compute_s * backward_fraction
    return fwd + max(bwd, overlap * comm_s) + (1.0 - overlap) * comm_s + codec_s


# ---------------------------------------------------------------------------
# Measurements: reading and fitting.

REQUIRED = ("net", "codec", "replicas", "num_ps", "link_rate_bps", "batch_per_replica", "step_time_s",
            "compute_time_s", "payload_bytes_per_replica", "aggregated_bytes_per_replica", "encode_s",
            "decode_s")
OPTIONAL = {"gpus_per_node": 1, "ps_layout": "dedicated", "ps_reduce_s": 0.0, "source": "", "ps_link_rate_bps": 0.0}
NUMERIC = ("replicas", "num_ps", "link_rate_bps", "batch_per_replica", "step_time_s", "compute_time_s",
           "payload_bytes_per_replica", "aggregated_bytes_per_replica", "encode_s", "decode_s",
           "gpus_per_node", "ps_reduce_s", "ps_link_rate_bps")


def grid_rows(doc, path):
    """Model rows from run_grid.py's results.json: every finished run on shaped
    links (unshaped loopback rows have no link to fit). The worker's apply
    counts as compute; payload and aggregate bytes are the replica's own."""
    rows = []
    for i, r in enumerate(doc["runs"], 1):
        if not r.get("ok") or not r.get("rate_bps"):
            continue
        for k in ("step_ms", "compute_ms", "apply_ms", "encode_ms", "decode_ms",
                  "bytes_sent_per_replica", "bytes_recv_per_replica"):
            if k not in r:
                raise ValueError("%s: run %d (%s) lacks %s" % (path, i, r.get("name", "?"), k))
        rows.append({"net": r["net"], "codec": r["codec"], "replicas": r["replicas"], "num_ps": r["num_ps"],
                     "link_rate_bps": r["rate_bps"], "batch_per_replica": 1 if r["net"] == "alexnet" else 32,
                     "step_time_s": r["step_ms"] / 1e3, "compute_time_s": (r["compute_ms"] + r["apply_ms"]) / 1e3,
                     "payload_bytes_per_replica": r["bytes_sent_per_replica"],
                     "aggregated_bytes_per_replica": r["bytes_recv_per_replica"],
                     "encode_s": r["encode_ms"] / 1e3, "decode_s": r["decode_ms"] / 1e3,
                     "source": "run_grid %s %s %s" % (r["name"], doc.get("date", ""), doc.get("cpu", ""))})
    return rows


def read_rows(path):
    """Rows of a CSV (lines starting with '#' are comments), a JSONL file, or
    run_grid.py's results.json, checked."""
    with open(path) as f:
        text = f.read()
    if text.lstrip().startswith("{") and path.endswith(".json"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError("%s: not JSON (%s)" % (path, e))
        if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
            raise ValueError("%s: a .json input must be run_grid.py's results.json (an object with \"runs\")" % path)
        text = "\n".join(json.dumps(r) for r in grid_rows(doc, path))
    body = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not body:
        raise ValueError("%s: no rows" % path)
    if path.endswith((".jsonl", ".json")) or body[0].lstrip().startswith("{"):
        raw = []
        for i, line in enumerate(body, 1):
            try:
                raw.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError("%s: row %d is not JSON (%s)" % (path, i, e))
    else:
        raw = list(csv.DictReader(body))
    rows = []
    for i, r in enumerate(raw, 1):
        missing = [c for c in REQUIRED if c not in r or r[c] in ("", None)]
        if missing:
            raise ValueError("%s: row %d lacks %s" % (path, i, ", ".join(missing)))
        row = dict(OPTIONAL)
        row.update({k: v for k, v in r.items() if v not in ("", None)})
        for c in NUMERIC:
            try:
                row[c] = float(row[c])
            except (TypeError, ValueError):
                raise ValueError("%s: row %d: %s = %r is not a number" % (path, i, c, row[c]))
            if not math.isfinite(row[c]) or row[c] < 0:
                raise ValueError("%s: row %d: %s = %r must be finite and >= 0" % (path, i, c, row[c]))
        for c in ("replicas", "num_ps", "link_rate_bps", "step_time_s", "batch_per_replica", "gpus_per_node"):
            if row[c] <= 0:
                raise ValueError("%s: row %d: %s must be > 0" % (path, i, c))
        if row["ps_layout"] not in ("dedicated", "colocated"):
            raise ValueError("%s: row %d: ps_layout must be dedicated or colocated" % (path, i))
        row["row"] = i
        rows.append(row)
    return rows


def row_links(row):
    return link_loads(int(row["replicas"]), int(row["num_ps"]), row["payload_bytes_per_replica"],
                      row["aggregated_bytes_per_replica"], int(row["gpus_per_node"]), row["ps_layout"])


def row_codec_s(row):
    return row["encode_s"] + row["decode_s"] + row["ps_reduce_s"]


def row_terms(row, inv_eff, alpha):
    """(bits/rate, msgs) of the network link that is the bottleneck under (inv_eff, alpha)."""
    best = None
    for link in row_links(row):
        if link["kind"] != "net":
            continue  # intra-node links are not in the measured setups' fit
        bits, msgs = link_terms(link)
        # The ps tasks' links may be shaped to another rate (ps_link_rate_bps; 0 = the same).
        ps_rate = row.get("ps_link_rate_bps", 0.0)
        rate = ps_rate if link.get("role") == "ps" and ps_rate > 0 \
            else row["link_rate_bps"]
        x = (bits / rate, msgs)
        t = x[0] * inv_eff + x[1] * alpha
        if best is None or t > best[0]:
            best = (t, x)
    return best[1] if best else (0.0, 0.0)


def predict_row(row, params):
    inv_eff, alpha = 1.0 / params["efficiency"], params["msg_overhead_s"]
    x1, x2 = row_terms(row, inv_eff, alpha)
    comm = x1 * inv_eff + x2 * alpha
    return step_time(row["compute_time_s"], row_codec_s(row), comm, params.get("overlap", 0.0),
                     params.get("backward_fraction", 2.0 / 3.0))


def _solve(xs, ys, weights, fix_alpha_zero):
    """Weighted least squares of ys ~ X theta; returns theta, covariance, weighted RSS."""
    import numpy as np
    X = np.array([[x[0]] if fix_alpha_zero else [x[0], x[1]] for x in xs], dtype=float)
    y = np.array(ys, dtype=float)
    w = np.array(weights, dtype=float)
    Xw, yw = X * w[:, None], y * w
    theta, _, rank, _ = np.linalg.lstsq(Xw, yw, rcond=None)
    if rank < X.shape[1]:
        raise ValueError("the rows do not determine the parameters (rank %d of %d): vary link rate, "
                         "payload size or replicas between rows" % (rank, X.shape[1]))
    res = yw - Xw @ theta
    rss = float(res @ res)
    dof = max(len(y) - X.shape[1], 1)
    cov = (rss / dof) * np.linalg.inv(Xw.T @ Xw)
    if fix_alpha_zero:
        theta = np.array([theta[0], 0.0])
        cov = np.array([[cov[0, 0], 0.0], [0.0, 0.0]])
    return theta, cov, rss


def fit(rows, weighting="relative", fit_overlap=False, backward_fraction=2.0 / 3.0, max_iter=25):
    """Least-squares fit of efficiency and msg_overhead_s (and overlap on a
    0.05 grid with fit_overlap). Linear in (1/efficiency, msg_overhead) once the
    bottleneck link and, with overlap, each row's regime (communication hidden
    under backward or not) are fixed; both are re-derived from the estimate
    until they stop changing (at most max_iter rounds)."""
    if len(rows) < 2:
        raise ValueError("need at least 2 rows to fit 2 parameters, got %d" % len(rows))
    overlaps = [i / 20 for i in range(21)] if fit_overlap else [0.0]
    best = None
    for ov in overlaps:
        theta = (1.0, 0.0)
        fix_alpha_zero = False
        for _ in range(max_iter):
            xs, ys, ws = [], [], []
            for r in rows:
                x = row_terms(r, theta[0], theta[1])
                comm = x[0] * theta[0] + x[1] * theta[1]
                fwd = r["compute_time_s"] * (1 - backward_fraction)
                bwd = r["compute_time_s"] * backward_fraction
                known = r["step_time_s"] - row_codec_s(r) - fwd
                if ov > 0 and ov * comm > bwd:
                    xs.append(x)                       # step = fwd + comm + codec
                    ys.append(known)
                else:
                    xs.append((x[0] * (1 - ov), x[1] * (1 - ov)))  # step = fwd + bwd + (1-ov) comm + codec
                    ys.append(known - bwd)
                ws.append(1.0 / r["step_time_s"] if weighting == "relative" else 1.0)
            if all(x[0] == 0 and x[1] == 0 for x in xs):
                break
            new, cov, rss = _solve(xs, ys, ws, fix_alpha_zero)
            if new[1] < 0 and not fix_alpha_zero:
                # A negative per-message overhead is unphysical: refit with it held at 0.
                fix_alpha_zero = True
                new, cov, rss = _solve(xs, ys, ws, True)
            converged = abs(new[0] - theta[0]) <= 1e-12 * max(1.0, abs(theta[0])) and \
                abs(new[1] - theta[1]) <= 1e-15
            theta = (float(new[0]), float(new[1]))
            if converged:
                break
        # After max_iter rounds without convergence the last estimate is kept;
        # the residuals reported with it show how good it is.
        if theta[0] <= 0:
            continue
        params = {"efficiency": 1.0 / theta[0], "msg_overhead_s": theta[1], "overlap": ov,
                  "backward_fraction": backward_fraction}
        loss = sum(((predict_row(r, params) - r["step_time_s"]) *
                    (1.0 / r["step_time_s"] if weighting == "relative" else 1.0)) ** 2 for r in rows)
        if best is None or loss < best[0]:
            se_inv = math.sqrt(max(cov[0][0], 0.0))
            params["efficiency_se"] = se_inv / theta[0] ** 2  # delta method on 1/x
            params["msg_overhead_s_se"] = math.sqrt(max(cov[1][1], 0.0))
            params["msg_overhead_held_at_zero"] = fix_alpha_zero
            best = (loss, params)
    if best is None:
        raise ValueError("no fit with a positive efficiency: check link_rate_bps and the byte columns")
    return best[1]


def residuals(rows, params):
    out = []
    for r in rows:
        pred = predict_row(r, params)
        out.append({"row": r["row"], "net": r["net"], "codec": r["codec"], "replicas": int(r["replicas"]),
                    "num_ps": int(r["num_ps"]), "link_rate_bps": r["link_rate_bps"],
                    "measured_step_s": r["step_time_s"], "predicted_step_s": pred,
                    "residual_s": r["step_time_s"] - pred,
                    "relative_residual": (r["step_time_s"] - pred) / r["step_time_s"],
                    "measured_images_per_s": r["replicas"] * r["batch_per_replica"] / r["step_time_s"],
                    "predicted_images_per_s": r["replicas"] * r["batch_per_replica"] / pred})
    return out


def summary_stats(res):
    rel = [abs(x["relative_residual"]) for x in res]
    ab = [x["residual_s"] for x in res]
    return {"rows": len(res), "rms_relative": math.sqrt(sum(v * v for v in rel) / len(rel)),
            "max_relative": max(rel), "rms_abs_s": math.sqrt(sum(v * v for v in ab) / len(ab))}


def cmd_fit(args):
    rows = read_rows(args.input)
    params = fit(rows, args.weighting, args.fit_overlap, args.backward_fraction)
    res = residuals(rows, params)
    stats = summary_stats(res)
    os.makedirs(args.out, exist_ok=True)
    synthetic = any("synthetic" in str(r.get("source", "")).lower() for r in rows)
    doc = {"input": os.path.abspath(args.input), "synthetic_input": synthetic, "weighting": args.weighting,
           "params": params, "stats": stats, "residuals": res, "environment": environment()}
    with open(os.path.join(args.out, "fit.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = ["# Performance model fit", ""]
    if synthetic:
        lines += ["**SYNTHETIC INPUT: these rows were generated, not measured.**", ""]
    lines += ["Input: `%s` (%d rows), weighting: %s (%s)." % (
        args.input, len(rows), args.weighting,
        "minimizes relative step-time errors" if args.weighting == "relative" else "minimizes seconds"), "",
        "| parameter | value | std. error |", "|---|---:|---:|",
        "| link efficiency | %.4f | %.4f |" % (params["efficiency"], params["efficiency_se"]),
        "| per-message overhead | %.3g s | %.2g s |" % (params["msg_overhead_s"], params["msg_overhead_s_se"]),
        "| overlap with backward | %.2f | %s |" % (params["overlap"], "grid 0.05" if args.fit_overlap else "fixed"),
        "", "Residuals: RMS relative %.2f%%, max relative %.2f%%, RMS %.3g s." % (
            100 * stats["rms_relative"], 100 * stats["max_relative"], stats["rms_abs_s"])]
    if params["msg_overhead_held_at_zero"]:
        lines.append("The unconstrained fit gave a negative per-message overhead; it is held at 0.")
    lines += ["", "| row | net | codec | W | P | rate (bit/s) | measured s | model s | residual |",
              "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for x in res:
        lines.append("| %d | %s | %s | %d | %d | %.3g | %.4g | %.4g | %+.1f%% |" % (
            x["row"], x["net"], x["codec"], x["replicas"], x["num_ps"], x["link_rate_bps"],
            x["measured_step_s"], x["predicted_step_s"], 100 * x["relative_residual"]))
    with open(os.path.join(args.out, "fit.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    plot_fit(res, os.path.join(args.out, "fit.png"), synthetic)
    print("\n".join(lines[:12]))
    print("wrote %s/fit.json, fit.md, fit.png" % args.out)
    return 0


def plot_fit(res, path, synthetic):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 5))
    for codec, marker in zip(CODECS, "osD"):
        pts = [x for x in res if x["codec"] == codec]
        if pts:
            ax.scatter([x["measured_step_s"] for x in pts], [x["predicted_step_s"] for x in pts],
                       marker=marker, label=codec, alpha=0.8)
    lo = min(min(x["measured_step_s"], x["predicted_step_s"]) for x in res)
    hi = max(max(x["measured_step_s"], x["predicted_step_s"]) for x in res)
    ax.plot([lo, hi], [lo, hi], "k:", lw=1, label="model = measured")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("model step time (s)")
    ax.set_title("perf model fit" + (" (SYNTHETIC input)" if synthetic else ""))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------
# Synthetic rows (to exercise and test `fit`; never a result).

SYNTH_NETS = {"lenet": 431080, "alexnet": 60965224}


def synth_rows(efficiency, overhead, noise, seed, overlap=0.0):
    rng = random.Random(seed)
    rows = []
    for net, n in SYNTH_NETS.items():
        compute = 0.01 if net == "lenet" else 0.2
        for codec in CODECS:
            for W in (1, 2, 4, 8):
                for P in (1, 2):
                    for rate in (1e8, 1e9):
                        push, pull = payload_bytes(codec, [n], W)
                        enc = 0.0 if codec == "fp32" else n * 0.5e-9
                        dec = n * 0.3e-9
                        row = {"net": net, "codec": codec, "replicas": W, "num_ps": P, "link_rate_bps": rate,
                               "batch_per_replica": 64, "compute_time_s": compute,
                               "payload_bytes_per_replica": push, "aggregated_bytes_per_replica": pull,
                               "encode_s": enc, "decode_s": dec, "gpus_per_node": 1,
                               "ps_layout": "dedicated", "ps_reduce_s": 0.0, "source": "synthetic"}
                        t = predict_row(row, {"efficiency": efficiency, "msg_overhead_s": overhead,
                                              "overlap": overlap})
                        row["step_time_s"] = t * (1.0 + noise * rng.gauss(0.0, 1.0))
                        rows.append(row)
    return rows


def cmd_synth(args):
    rows = synth_rows(args.efficiency, args.overhead, args.noise, args.seed, args.overlap)
    cols = list(REQUIRED) + ["gpus_per_node", "ps_layout", "ps_reduce_s", "source"]
    d = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(d, exist_ok=True)
    with open(args.output, "w", newline="") as f:
        f.write("# SYNTHETIC rows from perf_model.py synth (efficiency=%g, overhead=%g s, overlap=%g, "
                "noise=%g, seed=%d): generated by the model itself, NOT measurements.\n" %
                (args.efficiency, args.overhead, args.overlap, args.noise, args.seed))
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    print("wrote %d SYNTHETIC rows to %s" % (len(rows), args.output))
    return 0


# ---------------------------------------------------------------------------
# The paper's settings.

def conv(k, cin, cout, groups=1):
    return [k * k * cin // groups * cout, cout]


def alexnet_sizes():
    """Krizhevsky et al. 2012, two groups (as in the authors' definition): 60,965,224."""
    return (conv(11, 3, 96) + conv(5, 96, 256, 2) + conv(3, 256, 384) + conv(3, 384, 384, 2) +
            conv(3, 384, 256, 2) + [6 * 6 * 256 * 4096, 4096, 4096 * 4096, 4096, 4096 * 1000, 1000])


# Szegedy et al. 2015, Table 1: (#1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj).
INCEPTION = [(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), (192, 96, 208, 16, 48, 64),
             (160, 112, 224, 24, 64, 64), (128, 128, 256, 24, 64, 64), (112, 144, 288, 32, 64, 64),
             (256, 160, 320, 32, 128, 128), (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]


def googlenet_sizes():
    """GoogLeNet (Inception v1) of Szegedy et al. 2015 Table 1, weights and
    biases, without the auxiliary classifiers: 6,998,552 (Table 1 lists about
    6.8M, weights only)."""
    sizes = conv(7, 3, 64) + conv(1, 64, 64) + conv(3, 64, 192)
    cin = 192
    for a, b, c, d, e, f in INCEPTION:
        sizes += conv(1, cin, a) + conv(1, cin, b) + conv(3, b, c) + conv(1, cin, d) + conv(5, d, e) + conv(1, cin, f)
        cin = a + c + e + f
    return sizes + [cin * 1000, 1000]


def vgg_a_sizes():
    """VGG-A (11 weight layers) of Simonyan & Zisserman 2014: 132,863,336."""
    sizes, cin = [], 3
    for c in (64, 128, 256, 256, 512, 512, 512, 512):
        sizes += conv(3, cin, c)
        cin = c
    return sizes + [7 * 7 * 512 * 4096, 4096, 4096 * 4096, 4096, 4096 * 1000, 1000]


NETS = {"AlexNet": alexnet_sizes, "GoogLeNet": googlenet_sizes, "VGG-A": vgg_a_sizes}
# Per-GPU batch of the paper's throughput study (as we read the paper's
# throughput figure caption: AlexNet 128, GoogLeNet 64, VGG-A 32).
PAPER_BATCH = {"AlexNet": 128, "GoogLeNet": 64, "VGG-A": 32}

# Single-GPU training images/s (compute only): ASSUMPTIONS, each with its source.
# GTX 1080: Caffe2 convnet_benchmarks.py docstring (Titan X Maxwell, cuDNN v4,
#   forward+backward per batch: AlexNet 90.1 ms at batch 128, Inception(v1)
#   3.65 ms/image at batch 64, VGG-A 551.7 ms at batch 64) times 1.10, the
#   lower end of "GTX 1080 is 1.10x to 1.15x faster than the Maxwell Titan X"
#   (jcjohnson/cnn-benchmarks README). VGG-A at batch 32 is taken at its
#   batch-64 rate (slightly optimistic).
# P100: AlexNet 2987 img/s (tensorflow.org benchmarks, DGX-1 P100, batch 512,
#   synthetic data; the paper's batch 128 would be slower); GoogLeNet 468 img/s
#   (Dell HPC white paper, NV-Caffe GoogLeNet on 1 P100); VGG-A: VGG16's 144
#   img/s at batch 32 (tensorflow.org, DGX-1) times 2.0, the ratio of their
#   forward FLOPs (15.5 / 7.6 GFLOPs).
GPU_IMAGES_PER_S = {
    "gtx1080": {"AlexNet": 128 / 0.0901 * 1.10, "GoogLeNet": 1 / 3.65e-3 * 1.10, "VGG-A": 64 / 0.5517 * 1.10},
    "p100": {"AlexNet": 2987.0, "GoogLeNet": 468.0, "VGG-A": 144.0 * 2.0},
}
# Worker-side codec cost per element on the GPU (ASSUMPTION: memory-bound at
# 70% of peak bandwidth; encode reads the gradient twice (statistics, then
# quantize) and writes 2 bits: 8.25 B/element; decoding the pulled sum reads
# <= 11 bits and writes 4 B). fp32/fp16 are taken as free on the worker.
GPU_MEM_BPS = {"gtx1080": 320e9, "p100": 732e9}
# ps-side aggregation per received element (ps on the host CPU): ASSUMPTION
# from this repository's bench/RESULTS.md on a 2-core EPYC: fused ternary sum
# of 4 payloads ~24 Gelem/s (~0.01 ns per element and contribution); fp32
# float sum taken as a memory-bound add at ~6.5 Gelem/s (decode_accumulate-like).
PS_REDUCE_NS = {"fp32": 0.15, "fp16": 0.15, "terngrad": 0.01}

CLUSTERS = {
    # Paper: 128 nodes x 4 GTX 1080, one PCI switch per node, 1 Gbps Ethernet.
    "gtx1080-1gbe": {"gpu": "gtx1080", "rate_bps": 1e9, "gpus_per_node": 4, "intra_bps": 80e9,
                     "msg_overhead_s": 50e-6, "label": "GTX 1080, 1 Gbit/s Ethernet"},
    # Paper: 128 nodes x 4 P100 (NVLink), 100 Gbps InfiniBand (rate: assumption, EDR).
    "p100-ib": {"gpu": "p100", "rate_bps": 100e9, "gpus_per_node": 4, "intra_bps": 160e9,
                "msg_overhead_s": 5e-6, "label": "P100, 100 Gbit/s InfiniBand"},
}
for _name, _c in CLUSTERS.items():
    _c["name"] = _name

# The paper's quoted throughputs (images/s), for markers: (cluster, net, workers, codec, value, what).
PAPER_FIG = "Fig. 7"
PAPER_POINTS = [
    ("gtx1080-1gbe", "AlexNet", 512, "fp32", 25e3), ("gtx1080-1gbe", "AlexNet", 512, "terngrad", 100e3),
    ("gtx1080-1gbe", "GoogLeNet", 512, "fp32", 36e3), ("gtx1080-1gbe", "GoogLeNet", 512, "terngrad", 63e3),
    ("gtx1080-1gbe", "VGG-A", 512, "fp32", 1.5e3), ("gtx1080-1gbe", "VGG-A", 512, "terngrad", 12.4e3),
    ("p100-ib", "AlexNet", 512, "fp32", 161e3), ("p100-ib", "AlexNet", 512, "terngrad", 211e3),
]
# TernGrad / fp32 throughput ratios quoted: AlexNet on 8 GPUs about 3x.
PAPER_RATIOS = [("gtx1080-1gbe", "AlexNet", 8, 3.0)]
for _c, _n, _w, _k, _v in PAPER_POINTS:
    if _k == "terngrad":
        _fp = [v for c, n, w, k, v in PAPER_POINTS if (c, n, w, k) == (_c, _n, _w, "fp32")][0]
        PAPER_RATIOS.append((_c, _n, _w, _v / _fp))


def network_side(codec, sizes, W, G, aggregation, float_below):
    """(network workers, GPUs per network worker, push, pull, per-GPU push) for
    W GPUs, G per node. aggregation: "none" = every GPU is a ps client;
    "sum" = a node sums its GPUs' gradients over PCIe first and pushes one
    payload (TernGrad: the packed sum, bit_width(2G) bits); "ternary" = the
    node's sum is ternarized again (2 bits; more variance, not in the paper's
    algorithm: an upper bound on what node aggregation can save)."""
    G = min(G, W)
    nodes = -(-W // G)
    gpu_push, gpu_pull = payload_bytes(codec, sizes, W, float_below)
    if aggregation == "none" or G == 1:
        return W, G, gpu_push, gpu_pull, gpu_push
    if aggregation == "sum":
        push, pull = node_payload_bytes(codec, sizes, G, W, float_below)
    elif aggregation == "ternary":
        push, pull = node_payload_bytes(codec, sizes, 1, nodes, float_below)
    else:
        raise ValueError("node aggregation must be none, sum or ternary, got %r" % aggregation)
    return nodes, 1, push, pull, gpu_push


def evaluate(net, codec, W, cluster, o, rate_bps=None):
    """One point of the paper evaluation: dict with step time, images/s, parts.
    o: efficiency, msg_overhead (per cluster name), overlap, layout, num_ps,
    float_below, aggregation."""
    sizes = NETS[net]()
    n = sum(sizes)
    batch = PAPER_BATCH[net]
    rate = rate_bps if rate_bps is not None else cluster["rate_bps"]
    ips = GPU_IMAGES_PER_S[cluster["gpu"]][net]
    compute = batch / ips
    G = min(cluster["gpus_per_node"], W)
    nodes = -(-W // G)
    P = nodes if o.layout == "colocated" else o.num_ps
    net_w, net_g, push, pull, gpu_push = network_side(codec, sizes, W, G, o.aggregation, o.float_below)
    if W == 1:
        comm, link, codec_s = 0.0, "none (1 GPU)", 0.0
    else:
        links = link_loads(net_w, P, push, pull, net_g, o.layout)
        if net_g == 1 and G > 1:
            # Node aggregation: every GPU's payload still crosses the node's uplink.
            links.append(dict(name="intra-node uplink", kind="intra", bytes_in=G * pull, bytes_out=G * gpu_push,
                              msgs_in=0, msgs_out=0))
        comm, link = comm_time(links, rate, o.efficiency, o.msg_overhead[cluster["name"]], cluster["intra_bps"])
        mem = GPU_MEM_BPS[cluster["gpu"]] * 0.7
        worker = (n * 8.25 / mem + n * 4.5 / mem) if codec == "terngrad" else 0.0
        ps = net_w * n / P * PS_REDUCE_NS[codec] * 1e-9
        codec_s = worker + ps
    t = step_time(compute, codec_s, comm, o.overlap)
    return {"cluster": cluster["name"], "net": net, "codec": codec, "workers": W, "nodes": nodes, "num_ps": P,
            "batch_per_gpu": batch, "params": n, "push_bytes": push, "pull_bytes": pull, "compute_s": compute,
            "codec_s": codec_s, "comm_s": comm, "bottleneck": link, "step_s": t, "images_per_s": W * batch / t,
            "speedup_vs_1gpu": (W * batch / t) / ips, "link_rate_bps": rate, "gpu_images_per_s": ips}


def paper_options(args):
    """The model's settings for `paper`: CLI values, or efficiency and
    per-message overhead from a fit.json."""
    o = argparse.Namespace(efficiency=args.efficiency, overlap=args.overlap, layout=args.layout,
                           num_ps=args.num_ps, float_below=args.float_below, aggregation=args.node_aggregation,
                           msg_overhead={c: (args.msg_overhead if args.msg_overhead is not None else cl["msg_overhead_s"])
                                         for c, cl in CLUSTERS.items()}, from_fit=args.from_fit, synthetic_fit=False)
    if args.from_fit:
        with open(args.from_fit) as f:
            fitted = json.load(f)
        o.efficiency = fitted["params"]["efficiency"]
        o.msg_overhead = {c: fitted["params"]["msg_overhead_s"] for c in CLUSTERS}
        o.synthetic_fit = bool(fitted.get("synthetic_input"))
        if o.synthetic_fit:
            print("WARNING: %s was fitted to SYNTHETIC rows" % args.from_fit)
    return o


def cmd_paper(args):
    o = paper_options(args)
    workers = [2 ** i for i in range(11) if 2 ** i <= args.max_workers]
    rates = [10 ** (7 + i / 4) for i in range(0, 4 * 4 + 1)]  # 10 Mbit/s .. 100 Gbit/s
    points, by_rate = [], []
    for cname, cl in CLUSTERS.items():
        for net in NETS:
            for codec in args.codecs:
                for W in workers:
                    points.append(evaluate(net, codec, W, cl, o))
                if cname == "gtx1080-1gbe":
                    for W in sorted({8, args.max_workers}):
                        for rate in rates:
                            by_rate.append(evaluate(net, codec, W, cl, o, rate_bps=rate))
    # The same 512-GPU points under the other node-aggregation and layout choices.
    variants = []
    for agg in ("none", "sum", "ternary"):
        for layout in ("colocated", "dedicated"):
            ov = argparse.Namespace(**vars(o))
            ov.aggregation, ov.layout = agg, layout
            for cname, cl in CLUSTERS.items():
                for net in NETS:
                    fp = evaluate(net, "fp32", args.max_workers, cl, ov)
                    tg = evaluate(net, "terngrad", args.max_workers, cl, ov)
                    variants.append({"aggregation": agg, "layout": layout, "cluster": cname, "net": net,
                                     "workers": args.max_workers, "fp32_images_per_s": fp["images_per_s"],
                                     "terngrad_images_per_s": tg["images_per_s"]})
    implied = paper_implied(o)
    os.makedirs(args.out, exist_ok=True)
    settings = {"efficiency": o.efficiency, "msg_overhead_s": o.msg_overhead, "overlap": o.overlap,
                "layout": o.layout, "num_ps": "one per node" if o.layout == "colocated" else o.num_ps,
                "node_aggregation": o.aggregation, "float_below": o.float_below, "clusters": CLUSTERS,
                "gpu_images_per_s": GPU_IMAGES_PER_S, "batch_per_gpu": PAPER_BATCH, "from_fit": o.from_fit,
                "fit_was_synthetic": o.synthetic_fit}
    doc = {"settings": settings, "points": points, "by_rate": by_rate, "variants_at_max_workers": variants,
           "paper_points": PAPER_POINTS, "paper_ratios": PAPER_RATIOS, "paper_implied": implied,
           "environment": environment()}
    with open(os.path.join(args.out, "paper_model.json"), "w") as f:
        json.dump(doc, f, indent=1)
    write_paper_md(args, o, points, implied, variants)
    plot_paper(args, o, points, by_rate)
    print(open(os.path.join(args.out, "paper_model.md")).read())
    return 0


def paper_implied(o):
    """For each fp32/TernGrad pair the paper quotes at 512 GPUs, the compute time
    and link rate that make this model reproduce both numbers exactly
    (t = c + bits_on_busiest_network_link / rate; codec cost and per-message
    overhead left out), under the chosen layout and node aggregation."""
    out = []
    for cname, net, W, codec, v in PAPER_POINTS:
        if codec != "fp32":
            continue
        tg = [x[4] for x in PAPER_POINTS if x[:4] == (cname, net, W, "terngrad")][0]
        cl = CLUSTERS[cname]
        batch = PAPER_BATCH[net]
        sizes = NETS[net]()
        G = min(cl["gpus_per_node"], W)
        nodes = -(-W // G)
        P = nodes if o.layout == "colocated" else o.num_ps
        bits = {}
        for k in ("fp32", "terngrad"):
            net_w, net_g, push, pull, _ = network_side(k, sizes, W, G, o.aggregation, o.float_below)
            links = [link for link in link_loads(net_w, P, push, pull, net_g, o.layout) if link["kind"] == "net"]
            bits[k] = max(link_terms(link)[0] for link in links)
        s_fp, s_tg = W * batch / v, W * batch / tg
        inv_rate = (s_fp - s_tg) / (bits["fp32"] - bits["terngrad"])
        c = s_fp - bits["fp32"] * inv_rate
        out.append({"cluster": cname, "net": net, "workers": W, "paper_fp32": v, "paper_terngrad": tg,
                    "implied_compute_s": c, "implied_gpu_images_per_s": batch / c if c > 0 else None,
                    "implied_link_bps": 1 / inv_rate if inv_rate > 0 else None,
                    "assumed_gpu_images_per_s": GPU_IMAGES_PER_S[cl["gpu"]][net],
                    "nominal_link_bps": cl["rate_bps"]})
    return out


def fmt_k(x):
    return "%.1fK" % (x / 1e3) if x >= 1e3 else "%.0f" % x


def write_paper_md(args, o, points, implied, variants):
    lines = ["# TernGrad performance model at the paper's settings", "",
             "Model: `experiments/network/perf_model.py paper` (experiments/network/README.md). Every input is an",
             "assumption (sources in the script and the README): single-GPU images/s, link efficiency %.3g%s," % (
                 o.efficiency, " (from %s%s)" % (o.from_fit, ", SYNTHETIC" if o.synthetic_fit else "") if o.from_fit else ""),
             "per-message overhead %s, ps layout %s, node aggregation %s, %s." % (
                 ", ".join("%s %.3g us" % (c, 1e6 * a) for c, a in o.msg_overhead.items()), o.layout, o.aggregation,
                 "no overlap of communication with backward" if o.overlap == 0 else "overlap %.2f" % o.overlap),
             "The paper's columns are its quoted figures, not outputs of this model.", "",
             "| cluster | net | params | batch/GPU | 1-GPU img/s (assumed) | workers | fp32 img/s | TernGrad img/s | ratio | paper fp32 | paper TernGrad | paper ratio |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    idx = {(p["cluster"], p["net"], p["codec"], p["workers"]): p for p in points}
    for cname in CLUSTERS:
        for net in NETS:
            for W in (8, 64, 512):
                fp, tg = idx.get((cname, net, "fp32", W)), idx.get((cname, net, "terngrad", W))
                if not fp or not tg:
                    continue
                pf = [x[4] for x in PAPER_POINTS if x[:4] == (cname, net, W, "fp32")]
                pt = [x[4] for x in PAPER_POINTS if x[:4] == (cname, net, W, "terngrad")]
                pr = [x[3] for x in PAPER_RATIOS if x[:3] == (cname, net, W)]
                lines.append("| %s | %s | %.2fM | %d | %.0f | %d | %s | %s | %.2fx | %s | %s | %s |" % (
                    cname, net, fp["params"] / 1e6, fp["batch_per_gpu"], fp["gpu_images_per_s"], W,
                    fmt_k(fp["images_per_s"]), fmt_k(tg["images_per_s"]), tg["images_per_s"] / fp["images_per_s"],
                    fmt_k(pf[0]) if pf else "", fmt_k(pt[0]) if pt else "", "%.1fx" % pr[0] if pr else ""))
    lines += ["", "What the paper's own pairs imply under this model's link loads (t = compute + bits on the",
              "busiest link / rate, solved for both unknowns from the fp32 and TernGrad figures):", "",
              "| cluster | net | paper fp32 -> TernGrad | implied 1-GPU img/s | assumed 1-GPU img/s | implied link rate | nominal |",
              "|---|---|---|---:|---:|---:|---:|"]
    for x in implied:
        lines.append("| %s | %s | %s -> %s | %s | %.0f | %s | %.3g bit/s |" % (
            x["cluster"], x["net"], fmt_k(x["paper_fp32"]), fmt_k(x["paper_terngrad"]),
            "%.0f" % x["implied_gpu_images_per_s"] if x["implied_gpu_images_per_s"] else "n/a (c <= 0)",
            x["assumed_gpu_images_per_s"],
            "%.3g bit/s" % x["implied_link_bps"] if x["implied_link_bps"] else "n/a",
            x["nominal_link_bps"]))
    lines += ["", "The %d-GPU points under each ps layout and node aggregation (images/s, fp32 -> TernGrad, ratio):" %
              args.max_workers, "",
              "| cluster | net | " + " | ".join("%s, %s" % (a, l) for a in ("none", "sum", "ternary")
                                                 for l in ("colocated", "dedicated")) + " |",
              "|---|---|" + "---|" * 6]
    for cname in CLUSTERS:
        for net in NETS:
            cells = []
            for a in ("none", "sum", "ternary"):
                for l in ("colocated", "dedicated"):
                    v = [x for x in variants if (x["aggregation"], x["layout"], x["cluster"], x["net"]) ==
                         (a, l, cname, net)][0]
                    cells.append("%s -> %s (%.1fx)" % (fmt_k(v["fp32_images_per_s"]), fmt_k(v["terngrad_images_per_s"]),
                                                      v["terngrad_images_per_s"] / v["fp32_images_per_s"]))
            lines.append("| %s | %s | %s |" % (cname, net, " | ".join(cells)))
    lines += ["", "(dedicated: %d ps machines, each with its own link at the cluster's rate.)" % o.num_ps]
    lines += ["", "Paper figures: Wen et al. 2017, %s (figure number as we recall it; not checked against the PDF "
              "here), as quoted in /work/shared/terngrad-reference.md." % PAPER_FIG]
    with open(os.path.join(args.out, "paper_model.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def plot_paper(args, o, points, by_rate):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"AlexNet": "tab:blue", "GoogLeNet": "tab:green", "VGG-A": "tab:red"}
    style = {"fp32": ":", "fp16": "-.", "terngrad": "-"}
    label_paper = "paper (Wen et al. 2017, %s)" % PAPER_FIG

    def curves(ax, cname, key, codecs):
        for net in NETS:
            for codec in codecs:
                pts = sorted((p for p in points if p["cluster"] == cname and p["net"] == net and p["codec"] == codec),
                             key=lambda p: p["workers"])
                ax.plot([p["workers"] for p in pts], [key(p) for p in pts], style[codec], color=colors[net],
                        label="%s %s (model)" % (net, codec))

    # images/s and speedup vs workers, one panel per cluster.
    for what, key, fname, ylabel in (
            ("images", lambda p: p["images_per_s"], "images_per_s_vs_workers.png", "images/s (all workers)"),
            ("speedup", lambda p: p["speedup_vs_1gpu"], "speedup_vs_workers.png", "speedup over 1 GPU (compute only)")):
        fig, axes = plt.subplots(1, len(CLUSTERS), figsize=(13, 5.2))
        for ax, cname in zip(axes, CLUSTERS):
            curves(ax, cname, key, args.codecs)
            if what == "images":
                labelled = set()
                for c, net, W, codec, v in PAPER_POINTS:
                    if c == cname:
                        ax.plot([W], [v], "o" if codec == "terngrad" else "s", mfc="none", mew=1.8, ms=9,
                                color=colors[net],
                                label=None if codec in labelled else "%s, %s" % (label_paper, codec))
                        labelled.add(codec)
                        ax.annotate("%s %s" % (net, "TG" if codec == "terngrad" else "fp32"), (W, v),
                                    textcoords="offset points", xytext=(-8, 6), ha="right", fontsize=7,
                                    color=colors[net])
            else:
                ws = sorted({p["workers"] for p in points})
                ax.plot(ws, ws, "k", lw=0.6, alpha=0.4, label="linear")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("workers (GPUs, %d per node)" % CLUSTERS[cname]["gpus_per_node"])
            ax.set_ylabel(ylabel)
            ax.set_title(CLUSTERS[cname]["label"])
            ax.grid(True, which="both", alpha=0.25)
        axes[0].legend(fontsize=7, loc="upper left")
        fig.suptitle("TernGrad perf model (%s; inputs are assumptions, see paper_model.md)" % ("%s ps, node aggregation %s" % (o.layout, o.aggregation)) +
                     ("" if what == "images" else ": markers only on the images/s and ratio plots"), fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, fname), dpi=110)
        plt.close(fig)

    # TernGrad / fp32 ratio vs workers, with the paper's ratios.
    fig, axes = plt.subplots(1, len(CLUSTERS), figsize=(13, 5))
    for ax, cname in zip(axes, CLUSTERS):
        for net in NETS:
            fp = {p["workers"]: p for p in points if p["cluster"] == cname and p["net"] == net and p["codec"] == "fp32"}
            tg = {p["workers"]: p for p in points if p["cluster"] == cname and p["net"] == net and p["codec"] == "terngrad"}
            ws = sorted(set(fp) & set(tg))
            ax.plot(ws, [tg[w]["images_per_s"] / fp[w]["images_per_s"] for w in ws], "-", color=colors[net],
                    label="%s (model)" % net)
        first = True
        for c, net, W, r in PAPER_RATIOS:
            if c == cname:
                ax.plot([W], [r], "o", mfc="none", mew=1.8, ms=9, color=colors[net], label=label_paper if first else None)
                first = False
        ax.set_xscale("log", base=2)
        ax.set_xlabel("workers (GPUs)")
        ax.set_ylabel("TernGrad images/s / fp32 images/s")
        ax.set_title(CLUSTERS[cname]["label"])
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "terngrad_over_fp32_vs_workers.png"), dpi=110)
    plt.close(fig)

    # Speedup vs bandwidth (GTX 1080 nodes), at 8 and max workers; right: TernGrad/fp32.
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    wsets = sorted({p["workers"] for p in by_rate})
    for net in NETS:
        for W, lw in zip(wsets, (1.0, 2.0)):
            for codec in args.codecs:
                pts = sorted((p for p in by_rate if p["net"] == net and p["codec"] == codec and p["workers"] == W),
                             key=lambda p: p["link_rate_bps"])
                axes[0].plot([p["link_rate_bps"] / 1e9 for p in pts], [p["speedup_vs_1gpu"] for p in pts],
                             style[codec], color=colors[net], lw=lw, label="%s %s W=%d" % (net, codec, W))
            fp = sorted((p for p in by_rate if p["net"] == net and p["codec"] == "fp32" and p["workers"] == W),
                        key=lambda p: p["link_rate_bps"])
            tg = sorted((p for p in by_rate if p["net"] == net and p["codec"] == "terngrad" and p["workers"] == W),
                        key=lambda p: p["link_rate_bps"])
            if fp and tg:
                axes[1].plot([p["link_rate_bps"] / 1e9 for p in fp],
                             [b["images_per_s"] / a["images_per_s"] for a, b in zip(fp, tg)], "-", color=colors[net],
                             lw=lw, label="%s W=%d (model)" % (net, W))
    first = True
    for c, net, W, r in PAPER_RATIOS:
        rate = CLUSTERS[c]["rate_bps"] / 1e9
        axes[1].plot([rate], [r], "o" if c == "gtx1080-1gbe" else "^", mfc="none", mew=1.8, ms=9, color=colors[net],
                     label=label_paper if first else None)
        axes[1].annotate("%s W=%d%s" % (net, W, " (P100/IB)" if c == "p100-ib" else ""), (rate, r),
                         textcoords="offset points", xytext=(6, 4), fontsize=7, color=colors[net])
        first = False
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("link rate (Gbit/s)")
        ax.grid(True, which="both", alpha=0.25)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("speedup over 1 GPU")
    axes[0].set_title("GTX 1080 nodes (4 GPUs each): speedup vs bandwidth")
    axes[1].set_ylabel("TernGrad / fp32 images/s")
    axes[1].set_title("TernGrad gain vs bandwidth (GTX 1080 nodes; P100/IB marker at 100 Gbit/s)")
    axes[0].legend(fontsize=6, ncol=2)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "speedup_vs_bandwidth.png"), dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------

def environment():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"python": platform.python_version(), "cpu": cpu,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(here, "..", "results", "network")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit", help="fit efficiency and per-message overhead to measured steps")
    f.add_argument("input", help="CSV or JSONL with the columns: " + ", ".join(REQUIRED) +
                   " (optional: gpus_per_node, ps_layout dedicated|colocated, ps_reduce_s, "
                   "ps_link_rate_bps, source)")
    f.add_argument("--out", default=os.path.join(default_out, "fit"))
    f.add_argument("--weighting", choices=("relative", "absolute"), default="relative",
                   help="relative (default): each row's error divided by its step time, so 10 ms and 10 s "
                        "steps count alike")
    f.add_argument("--fit-overlap", action="store_true", help="also fit the overlap share (0..1, 0.05 grid)")
    f.add_argument("--backward-fraction", type=float, default=2.0 / 3.0)
    s = sub.add_parser("synth", help="write SYNTHETIC rows generated by the model (for trying `fit`)")
    s.add_argument("output")
    s.add_argument("--efficiency", type=float, default=0.85)
    s.add_argument("--overhead", type=float, default=2e-4, help="per-message overhead, seconds")
    s.add_argument("--overlap", type=float, default=0.0)
    s.add_argument("--noise", type=float, default=0.02, help="relative Gaussian noise on step times")
    s.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("paper", help="evaluate at the paper's settings and plot")
    p.add_argument("--out", default=default_out)
    p.add_argument("--efficiency", type=float, default=0.9,
                   help="link efficiency (ASSUMPTION: TCP/IP headers and protocol; tbf-shaped veth gave "
                        "0.95 here with a bulk stream)")
    p.add_argument("--msg-overhead", type=float, default=None,
                   help="per-message overhead in seconds for both clusters (default 50 us Ethernet, 5 us IB)")
    p.add_argument("--from-fit", help="fit.json from `fit`: take efficiency and per-message overhead from it")
    p.add_argument("--overlap", type=float, default=0.0)
    p.add_argument("--layout", choices=("colocated", "dedicated"), default="colocated",
                   help="colocated (default): one ps shard on every node; dedicated: --num-ps separate servers")
    p.add_argument("--num-ps", type=int, default=16, help="ps machines with --layout dedicated")
    p.add_argument("--node-aggregation", choices=("sum", "none", "ternary"), default="sum",
                   help="sum (default): a node sums its 4 GPUs' gradients before the network (TernGrad: packed "
                        "bit_width(8) = 4-bit counts); none: every GPU is a ps client; ternary: the node's sum "
                        "is ternarized again (2 bits, not in the paper's algorithm)")
    p.add_argument("--float-below", type=int, default=9217,
                   help="TernGrad variables with fewer elements stay fp32 (authors' AlexNet size_to_binarize)")
    p.add_argument("--max-workers", type=int, default=512, choices=[2 ** i for i in range(3, 11)])
    p.add_argument("--codecs", nargs="+", default=["fp32", "terngrad"], choices=CODECS)
    args = ap.parse_args(argv)
    try:
        return {"fit": cmd_fit, "synth": cmd_synth, "paper": cmd_paper}[args.cmd](args)
    except (ValueError, OSError) as e:
        print("perf_model.py: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
