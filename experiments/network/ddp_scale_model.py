#!/usr/bin/env python3
"""On paper: the DDP hooks at 8 to 512 ranks against a ring all-reduce.

    python3 experiments/network/ddp_scale_model.py [--params 1e8] [--out DIR]

Per step and rank, for a model of N parameters on links of R bit/s per rank
(100 and 400 Gbit/s), each collective costs (bits it receives) * N / R plus
alpha per message it waits for:

  fp32 ring all-reduce      2 * 32 (W-1)/W bits per element, 2 (W-1) messages
  fp16 ring all-reduce      2 * 16 (W-1)/W,                  2 (W-1)
  TernGrad, all-gather      2 (W-1) (each rank's 2-bit payload), W-1 (ring all-gather)
  TernGrad, reduce-scatter  2 (W-1)/W (all_to_all of slices)
                            + bit_width(2W) (W-1)/W (all-gather of the packed sums),
                            2 (W-1)

plus the codec's own time where it runs: the H100 rates measured in
bench/RESULTS.md (first section) for encode (2.03 TB/s of its 8N + N/4
bytes), decode (1.89 TB/s of 2 N/4 + 4N) and decode-accumulate (2.32 TB/s
of 2 N/4 + 8N: the all-gather hook runs it W times), and, assumed rather than
measured, the sum of W slice payloads at the decode's rate over the bytes it
reads and writes. Headers (40 bytes per payload) are counted. What the model
leaves out: overlap of communication with the backward pass (all hooks
gain alike), congestion, and the scale all-reduce (4 bytes).

Writes ddp_scale_model.md (tables) and ddp_scale_model.png (step
communication time against W) into --out.
"""
import argparse
import os

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
ALPHA_S = 5e-6                 # per message: an RDMA-class network's latency (assumed)
H100_ENCODE_BPS = 2.03e12      # bytes/s of 8N + N/4 (bench/RESULTS.md, 64M elements)
H100_DECODE_BPS = 1.887e12     # bytes/s of 2 N/4 + 4N (same run)
H100_ACCUMULATE_BPS = 2.32e12  # decode-accumulate, bytes/s of 2 N/4 + 8N (same run)
HEADER_BYTES = 40


def bit_width(v):
    return int(v).bit_length()


def hooks(world, n):
    """{name: (bits received per element, messages, codec seconds on an H100)}."""
    f = (world - 1) / world
    encode = (8 * n + n / 4) / H100_ENCODE_BPS
    decode = (2 * n / 4 + 4 * n) / H100_DECODE_BPS
    accumulate = (2 * n / 4 + 8 * n) / H100_ACCUMULATE_BPS
    sum_bits = bit_width(2 * world)
    # The sum reads W slice payloads of N/W elements (2 bits each) and writes one of sum_bits bits.
    summing = (n / world * 2 / 8 * world + n / world * sum_bits / 8) / H100_DECODE_BPS
    header = HEADER_BYTES * 8 / n
    return {
        "fp32 ring all-reduce": (2 * 32 * f, 2 * (world - 1), 0.0),
        "fp16 ring all-reduce": (2 * 16 * f, 2 * (world - 1), 0.0),
        "TernGrad all-gather": (2 * (world - 1) + header * (world - 1), world - 1, encode + world * accumulate),
        "TernGrad reduce-scatter": ((2 + sum_bits) * f + 2 * header * (world - 1), 2 * (world - 1),
                                    encode + summing + decode),
    }


def step_seconds(bits, messages, codec, n, rate):
    return bits * n / rate + ALPHA_S * messages + codec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=float, default=1e8, help="parameters N (default 1e8)")
    ap.add_argument("--out", default=os.path.join(REPO, "experiments", "results", "ddp"))
    args = ap.parse_args()
    n = int(args.params)
    worlds = [8, 16, 32, 64, 128, 256, 512]
    rates = [100e9, 400e9]
    os.makedirs(args.out, exist_ok=True)
    lines = ["# DDP hooks at scale, on paper (`experiments/network/ddp_scale_model.py`)", "",
             "N = %s parameters; per-message latency %g us; codec times from the H100 rates of bench/RESULTS.md "
             "(the sum's rate assumed equal to the decode's). Bits received per rank per element, then the "
             "step's communication time (ms) at 100 and 400 Gbit/s per rank." % ("{:,}".format(n), ALPHA_S * 1e6), ""]
    names = list(hooks(8, n))
    lines.append("| W | " + " | ".join("%s: bits" % k for k in names) + " |")
    lines.append("|---:|" + "---:|" * len(names))
    for w in worlds:
        h = hooks(w, n)
        lines.append("| %d | " % w + " | ".join("%.2f" % h[k][0] for k in names) + " |")
    series = {}
    for rate in rates:
        lines += ["", "At %d Gbit/s (ms per step; speedup over fp32 in brackets):" % (rate / 1e9), "",
                  "| W | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
        for w in worlds:
            h = hooks(w, n)
            t = {k: step_seconds(*h[k], n, rate) for k in names}
            for k in names:
                series.setdefault((rate, k), []).append(1e3 * t[k])
            base = t[names[0]]
            lines.append("| %d | " % w + " | ".join("%.2f (%.1fx)" % (1e3 * t[k], base / t[k]) for k in names) + " |")
    crossover = next((w for w in range(2, 4096) if hooks(w, n)["TernGrad all-gather"][0] >=
                      hooks(w, n)["fp32 ring all-reduce"][0]), None)
    lines += ["", "The all-gather hook receives as many bits as fp32's ring all-reduce from W = %s on; the "
              "reduce-scatter hook stays at (2 + bit_width(2W)) (W-1)/W: %.2f bits at W = 512 (fp32: %.2f)." % (
                  crossover, hooks(512, n)["TernGrad reduce-scatter"][0], hooks(512, n)["fp32 ring all-reduce"][0])]
    with open(os.path.join(args.out, "ddp_scale_model.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no PNG (Debian: python3-matplotlib)")
        return 0
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, rate in zip(axes, rates):
        for k in names:
            ax.plot(worlds, series[(rate, k)], marker="o", label=k)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks W")
        ax.set_title("%d Gbit/s per rank, N = %.0e" % (rate / 1e9, n))
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("communication per step (ms), model")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "ddp_scale_model.png"), dpi=110)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
