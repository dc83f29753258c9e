#!/usr/bin/python3
"""Real training runs over emulated links: step time against link speed.

Every run is a whole tg-cluster run with --link_rate (each task in its own
network namespace, tc tbf shaping both directions of every link), so the
numbers are real processes, real gRPC and real bytes on shaped links:

  python3 experiments/network/run_grid.py --build=build --out=experiments/results/network

For each (net, codec, replicas, ps, rate) it records, from the chief's
metrics.jsonl, the mean step time after a warm-up and where it went
(compute, encode, push, wait, pull, decode, apply), examples/s, the bytes on
the ps links from the interfaces' counters (link_stats.json), and the ps
link's utilisation while payloads are in flight: the ps's interface counters
are sampled every few milliseconds, and the busy windows' bytes are set
against the shaped rate. Time to a fixed test accuracy is the number of
steps an in-process run with the same replicas needs (the cluster's
arithmetic is the in-process trainer's, bit for bit: tests/distributed) times
the step time measured on each link.

--alexnet adds communication-only rows (AlexNet-sized gradients, 61M floats
in 16 variables: real encode, push, sum, pull, decode; no forward/backward).
Results: results.json, results.md and PNG plots in --out. Needs root (network
namespaces); runs are bounded by --timeout per run.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time

CODECS = {"fp32": ["--grad_bits=32"], "fp16": ["--codec=fp16"], "terngrad": ["--grad_bits=2"],
          # The same codes packed below 2 bits (quantize/FORMAT.md): 5 per byte, or rANS-coded
          # (with the ps's sum entropy-coded too); training is bit-identical to "terngrad".
          "terngrad-base3": ["--codec=terngrad:pack=base3"], "terngrad-entropy": ["--codec=terngrad:pack=entropy"],
          # experiments/results/codecs' recommendation: error feedback on the workers and the ps,
          # nearest rounding (fused into the codec's passes since issue 32).
          "ef-server-ef-nearest": ["--codec=ef(server_ef(terngrad:round=nearest))"],
          # Chosen per variable by the chief from its probe of the ps and the codecs' measured costs
          # (fp32, fp16 and the error-feedback configuration above; comm/codec_choice.h).
          "auto": ["--codec=auto"]}
NET_FLAGS = {
    # The paper's LeNet hyperparameters (momentum 0.9, lr 0.01, poly decay 0.5, wd 5e-4).
    "lenet": ["--net=lenet", "--batch_size=32", "--optimizer=momentum", "--momentum=0.9",
              "--initial_learning_rate=0.01", "--learning_rate_decay_type=polynomial",
              "--learning_rate_power=0.5", "--weight_decay=0.0005"],
    # CifarNet on Fashion-MNIST in CIFAR-10's binary format (tg-fmnist-to-cifar).
    "cifarnet": ["--net=cifarnet", "--batch_size=32", "--optimizer=adam", "--initial_learning_rate=0.0002",
                 "--quantize_logits=true"],
    "alexnet": ["--net=alexnet", "--dataset_name=synthetic", "--synthetic_examples=8", "--batch_size=1",
                # One fp32 step moves ~1 GB through the ps link: ~80 s at 100 Mbit/s, longer
                # than the default peer timeout a streamed pull waits for its sum.
                "--comm_only=true", "--peer_timeout_secs=600", "--rpc_timeout_secs=600"],
}
BREAKDOWN = ["compute", "encode", "push", "wait", "pull", "decode", "apply"]


def rate_bps(rate):
    if rate == "unshaped":  # loopback, no namespaces: the compute-bound step a model's bound starts from
        return None
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for u, f in units.items():
        if rate.endswith(u):
            return float(rate[: -len(u)]) * f
    raise ValueError(f"rate {rate!r}: expected e.g. 100mbit, 1gbit")


def ps_pids(launcher_pid):
    """The tg-train processes of the launcher's ps tasks (TF_CONFIG's task type)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != launcher_pid:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().decode(errors="replace")
        except OSError:
            continue
        if '"type": "ps"' in env:
            out.append(int(pid))
    return out


def net_counters(pid):
    """(rx_bytes, tx_bytes) of the non-loopback interfaces in pid's namespace."""
    rx = tx = 0
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f.readlines()[2:]:
            name, data = line.split(":", 1)
            if name.strip() == "lo":
                continue
            v = data.split()
            rx += int(v[0])
            tx += int(v[8])
    return rx, tx


class LinkSampler(threading.Thread):
    """Samples ps 0's interface counters every `period` seconds while the run lasts."""

    def __init__(self, launcher, period=0.005, limit_s=3600):
        super().__init__(daemon=True)
        self.launcher, self.period, self.limit_s = launcher, period, limit_s
        self.samples = []  # (t, rx, tx)
        self.stop = False

    def run(self):
        start = time.monotonic()
        pid = None
        while not self.stop and time.monotonic() - start < self.limit_s:
            if pid is None:
                pids = ps_pids(self.launcher.pid)
                pid = pids[0] if pids else None
            if pid is not None:
                try:
                    rx, tx = net_counters(pid)
                    self.samples.append((time.monotonic(), rx, tx))
                except OSError:
                    pid = None
            time.sleep(self.period if pid else 0.05)

    def utilisation(self, bps, window=0.005, busy=0.2):
        """The ps link's rate while payloads are in flight, as a fraction of the shaped rate, per
        direction (rx, tx): windows of `window` s above `busy` x the rate are busy; each run of
        busy windows loses its first and last (a transfer starting or ending inside them), and
        the interior's bytes are set against its duration. None: no run of 3+ busy windows."""
        s = self.samples
        res = []
        for k in (1, 2):
            wins = []  # (dt, bytes) of consecutive windows
            i = 0
            while i < len(s) - 1:
                j = i + 1
                while j < len(s) - 1 and s[j][0] - s[i][0] < window:
                    j += 1
                wins.append((s[j][0] - s[i][0], s[j][k] - s[i][k]))
                i = j
            busy_bytes = busy_time = 0.0
            run = []
            for dt, db in wins + [(1.0, 0)]:
                if dt > 0 and db * 8 / dt > busy * bps:
                    run.append((dt, db))
                    continue
                if len(run) >= 3:
                    busy_time += sum(x[0] for x in run[1:-1])
                    busy_bytes += sum(x[1] for x in run[1:-1])
                run = []
            res.append(busy_bytes * 8 / (busy_time * bps) if busy_time > 0 else None)
        return res[0], res[1]


def read_jsonl(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    out.append(json.loads(line))
    return out


def run_one(args, net, codec, replicas, num_ps, rate, steps, extra=()):
    name = f"{net}_{codec}_r{replicas}_ps{num_ps}_{rate}" + ("_" + "_".join(e.strip("-").replace("=", "") for e in extra) if extra else "")
    run_dir = os.path.abspath(os.path.join(args.out, "runs", name))
    subprocess.run(["rm", "-rf", run_dir], check=True)
    os.makedirs(run_dir)
    flags = NET_FLAGS[net] + CODECS[codec] + list(extra) + [
        # AlexNet rows are few, long steps: log every 2 so the first (the fixed
        # gradient's generation, connections) is left out of the mean.
        f"--max_steps={steps}", f"--log_every_n_steps={2 if net == 'alexnet' else args.log_every}", f"--train_dir={run_dir}",
        "--max_eval_examples=2000", "--moving_average_decay=0"]
    if net == "cifarnet":
        flags += ["--dataset_name=cifar10", f"--data_dir={os.path.abspath(args.cifar_dir)}"]
    shaped = rate != "unshaped"
    cmd = [os.path.join(args.build, "experiments", "tg-cluster")] + ([f"--link_rate={rate}"] if shaped else []) + [
           f"--num_ps={num_ps}",
           f"--num_workers={replicas - 1}", f"--timeout_secs={args.timeout}", "--"] + flags
    t0 = time.monotonic()
    with open(os.path.join(run_dir, "launcher.log"), "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        sampler = LinkSampler(p)
        if shaped:
            sampler.start()
        try:
            rc = p.wait(timeout=args.timeout + 60)
        except subprocess.TimeoutExpired:
            p.terminate()
            rc = p.wait(timeout=30)
        sampler.stop = True
        if shaped:
            sampler.join(timeout=5)
    wall = time.monotonic() - t0
    row = {"name": name, "net": net, "codec": codec, "replicas": replicas, "num_ps": num_ps, "rate": rate,
           "rate_bps": rate_bps(rate), "steps": steps, "ok": rc == 0, "wall_s": wall}
    if rc != 0:
        with open(os.path.join(run_dir, "launcher.log")) as f:
            row["error"] = f.read()[-2000:]
        print(f"  FAILED: {name}\n{row['error']}", file=sys.stderr)
        return row
    result_path = os.path.join(run_dir, "result.json")
    if os.path.exists(result_path):
        result = json.load(open(result_path))
        row["codecs_used"] = result.get("codecs", "")
        if "codec_choice" in result:  # --codec=auto: what the chief chose, and its estimate
            row["codec_choice"] = result["codec_choice"]
    train = [e for e in read_jsonl(os.path.join(run_dir, "metrics.jsonl")) if e.get("event") == "train"]
    # The steady state: the later half of the logged intervals. The first
    # ones hold connections, first-touch allocations and the fixed gradient;
    # an AlexNet cluster's first ~10 steps took twice the later ones' time
    # (2026-11-28), so a short run's mean over all of them says little about
    # a long one. The earlier half's mean step is kept beside it.
    half = len(train) // 2
    measured = train[half:] if len(train) > 1 else train
    n = len(measured)
    for k in ["step"] + BREAKDOWN:
        row[f"{k}_ms"] = sum(e.get(f"{k}_ms", 0) for e in measured) / n if n else float("nan")
    row["warmup_step_ms"] = sum(e.get("step_ms", 0) for e in train[:half]) / half if half else None  # JSON has no NaN
    batch = 1 if net == "alexnet" else 32
    row["examples_per_sec"] = replicas * batch / (row["step_ms"] / 1000)
    row["bytes_sent_per_replica"] = train[-1]["bytes_sent_per_worker"] if train else 0
    row["bytes_recv_per_replica"] = train[-1]["bytes_recv_per_worker"] if train else 0
    if not shaped:  # no links to count: the replicas' own byte counts, no ideal transfer
        row["ps_link_rx_per_step"] = replicas * row["bytes_sent_per_replica"]
        row["ps_link_tx_per_step"] = replicas * row["bytes_recv_per_replica"]
        row["ideal_transfer_ms"], row["util_rx"], row["util_tx"] = 0.0, None, None
        print(f"  {name}: step {row['step_ms']:.1f} ms (unshaped loopback)", flush=True)
        return row
    stats = json.load(open(os.path.join(run_dir, "logs", "link_stats.json")))
    ps = [t for t in stats["tasks"] if t["task"].startswith("ps-")]
    row["ps_link_rx_per_step"] = sum(t["rx_bytes"] for t in ps) / steps
    row["ps_link_tx_per_step"] = sum(t["tx_bytes"] for t in ps) / steps
    # The ps links' ideal transfer time: the busier direction of the busiest ps link.
    busiest = max(max(t["rx_bytes"], t["tx_bytes"]) for t in ps) / steps
    row["ideal_transfer_ms"] = busiest * 8 / stats["ps_link_rate_bps"] * 1000
    row["util_rx"], row["util_tx"] = sampler.utilisation(stats["ps_link_rate_bps"])
    parts = ", ".join("%s %.1f" % (k, row[k + "_ms"]) for k in BREAKDOWN)
    print(f"  {name}: step {row['step_ms']:.1f} ms ({parts}), "
          f"{row['examples_per_sec']:.0f} ex/s, ps link {row['ps_link_rx_per_step'] / 1e6:.2f} MB in / "
          f"{row['ps_link_tx_per_step'] / 1e6:.2f} MB out per step, ideal {row['ideal_transfer_ms']:.1f} ms, "
          f"utilisation in flight rx {row['util_rx']} tx {row['util_tx']}", flush=True)
    return row


def steps_to_accuracy(args, codec, replicas, target):
    """Steps an in-process LeNet run with `replicas` workers needs to reach target top-1 (None: never)."""
    run_dir = os.path.abspath(os.path.join(args.out, "runs", f"tta_lenet_{codec}_r{replicas}"))
    subprocess.run(["rm", "-rf", run_dir], check=True)
    cmd = [os.path.join(args.build, "experiments", "tg-train")] + NET_FLAGS["lenet"] + CODECS[codec] + [
        f"--num_nodes={replicas}", f"--max_steps={args.tta_steps}", f"--eval_interval_steps={args.tta_every}",
        "--moving_average_decay=0", f"--train_dir={run_dir}", "--quiet=true"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=3600)
    evals = [e for e in read_jsonl(os.path.join(run_dir, "metrics.jsonl")) if e.get("event") == "eval"]
    for e in sorted(evals, key=lambda e: e["step"]):
        if e["top1"] >= target:
            return e["step"], evals
    return None, evals


def write_table(rows, tta, args):
    lines = ["| net | codec | replicas | ps | rate | step ms | compute | encode | push | wait | pull | decode | apply |"
             " examples/s | vs fp32 | ps link MB in/out per step | ideal transfer ms | in-flight util rx/tx |"
             f" steps to {args.target:.0%} | time to {args.target:.0%} (s) |",
             "|" + "---|" * 20]
    fp32 = {(r["net"], r["replicas"], r["num_ps"], r["rate"]): r for r in rows if r["codec"] == "fp32" and r["ok"]}
    for r in rows:
        if not r["ok"]:
            lines.append(f"| {r['net']} | {r['codec']} | {r['replicas']} | {r['num_ps']} | {r['rate']} | failed |" + " |" * 14)
            continue
        base = fp32.get((r["net"], r["replicas"], r["num_ps"], r["rate"]))
        speed = f"{base['step_ms'] / r['step_ms']:.2f}x" if base else ""
        st = tta.get((r["codec"], r["replicas"])) if r["net"] == "lenet" else None
        tt = f"{st * r['step_ms'] / 1000:.0f}" if st else ("not reached" if r["net"] == "lenet" and (r["codec"], r["replicas"]) in tta else "")
        u = lambda x: f"{x:.0%}" if x is not None else "-"
        lines.append(
            f"| {r['net']} | {r['codec']} | {r['replicas']} | {r['num_ps']} | {r['rate']} | {r['step_ms']:.1f} | "
            + " | ".join(f"{r[k + '_ms']:.1f}" for k in BREAKDOWN)
            + f" | {r['examples_per_sec']:.{1 if r['examples_per_sec'] < 10 else 0}f} | {speed} | {r['ps_link_rx_per_step'] / 1e6:.2f} / {r['ps_link_tx_per_step'] / 1e6:.2f}"
            f" | {r['ideal_transfer_ms']:.1f} | {u(r['util_rx'])} / {u(r['util_tx'])} | {st or ''} | {tt} |")
    return "\n".join(lines) + "\n"


def plot(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    nets = sorted({r["net"] for r in rows if r["ok"]})
    fig, axes = plt.subplots(1, len(nets), figsize=(5.5 * len(nets), 4.2), squeeze=False)
    for ax, net in zip(axes[0], nets):
        for codec, style in (("fp32", "o-"), ("fp16", "s--"), ("terngrad", "^-")):
            for replicas, num_ps in sorted({(r["replicas"], r["num_ps"]) for r in rows if r["net"] == net}):
                pts = sorted((r["rate_bps"], r["examples_per_sec"]) for r in rows if r["ok"] and r["net"] == net and r["rate_bps"]
                             and r["codec"] == codec and r["replicas"] == replicas and r["num_ps"] == num_ps)
                if pts:
                    ax.plot([p[0] / 1e9 for p in pts], [p[1] for p in pts], style,
                            label=f"{codec}, {replicas} replicas, {num_ps} ps")
        ax.set_xscale("log")
        ax.set_xlabel("link rate (Gbit/s, tc tbf)")
        ax.set_ylabel("examples/s (images/s for AlexNet comm-only: steps x replicas)")
        ax.set_title(f"{net}: throughput vs link rate")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput_vs_link_rate.png"), dpi=120)
    # Where a step goes: stacked breakdown per run.
    ok = [r for r in rows if r["ok"] and r["net"] != "alexnet"]
    if ok:
        fig, ax = plt.subplots(figsize=(max(8, 0.32 * len(ok)), 4.5))
        bottom = [0.0] * len(ok)
        for k in BREAKDOWN:
            vals = [r[k + "_ms"] for r in ok]
            ax.bar(range(len(ok)), vals, bottom=bottom, label=k)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(range(len(ok)))
        ax.set_xticklabels([f"{r['net'][:5]} {r['codec']} r{r['replicas']} ps{r['num_ps']} {r['rate']}" for r in ok],
                           rotation=90, fontsize=6)
        ax.set_ylabel("ms per step (chief)")
        ax.set_yscale("log")
        ax.legend(fontsize=7)
        ax.set_title("Step time breakdown")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "step_breakdown.png"), dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default="experiments/results/network")
    ap.add_argument("--nets", default="lenet,cifarnet")
    ap.add_argument("--codecs", default="fp32,fp16,terngrad")
    ap.add_argument("--replicas", default="2,4")
    ap.add_argument("--ps", default="1,2")
    ap.add_argument("--rates", default="100mbit,1gbit,10gbit")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--log_every", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--cifar_dir", default="data/fashion-mnist-cifar")
    ap.add_argument("--alexnet", default="", help="comm-only AlexNet rows: replicas:ps:rate,... e.g. 4:1:1gbit")
    ap.add_argument("--alexnet_steps", type=int, default=8)
    ap.add_argument("--target", type=float, default=0.88, help="LeNet test top-1 for time to accuracy")
    ap.add_argument("--tta_steps", type=int, default=3000)
    ap.add_argument("--tta_every", type=int, default=100)
    ap.add_argument("--no_tta", action="store_true")
    ap.add_argument("--append", action="store_true", help="add to an existing results.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run_grid.py: emulated links need network namespaces: run as root")
    os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
    nets = [n for n in args.nets.split(",") if n]
    if "cifarnet" in nets and not os.path.exists(os.path.join(args.cifar_dir, "data_batch_1.bin")):
        subprocess.run([os.path.join(args.build, "experiments", "tg-fmnist-to-cifar"), f"--out={args.cifar_dir}"], check=True)
    result_path = os.path.join(args.out, "results.json")
    old = json.load(open(result_path)) if args.append and os.path.exists(result_path) else {}
    rows = old.get("runs", [])
    configs = [(net, codec, int(r), int(p), rate) for net in nets for r in args.replicas.split(",")
               for p in args.ps.split(",") for rate in args.rates.split(",") for codec in args.codecs.split(",")]
    for a in filter(None, args.alexnet.split(",")):
        r, p, rate = a.split(":")
        configs += [("alexnet", codec, int(r), int(p), rate) for codec in args.codecs.split(",")]
    start = time.monotonic()
    for i, (net, codec, r, p, rate) in enumerate(configs):
        done = time.monotonic() - start
        eta = done / i * (len(configs) - i) if i else float("nan")
        print(f"[{i + 1}/{len(configs)}] {net} {codec} {r} replicas {p} ps {rate} (elapsed {done:.0f} s, ETA {eta:.0f} s)",
              flush=True)
        steps = args.alexnet_steps if net == "alexnet" else args.steps
        rows = [x for x in rows if x["name"] != f"{net}_{codec}_r{r}_ps{p}_{rate}"]
        rows.append(run_one(args, net, codec, r, p, rate, steps))
        tmp = result_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"runs": rows}, f, indent=1)
        os.replace(tmp, result_path)
    tta = {(x["codec"], x["replicas"]): x["steps"] for x in old.get("steps_to_target", [])}
    if not args.no_tta and "lenet" in nets:
        for codec in args.codecs.split(","):
            for r in sorted({int(x) for x in args.replicas.split(",")}):
                print(f"time to accuracy: in-process LeNet, {codec}, {r} replicas", flush=True)
                tta[(codec, r)], _ = steps_to_accuracy(args, codec, r, args.target)
    doc = {"runs": rows, "steps_to_target": [{"codec": c, "replicas": r, "steps": s} for (c, r), s in tta.items()],
           "target_top1": args.target, "cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "),
           "date": time.strftime("%Y-%m-%d"),
           # The codec kernels the tasks ran (TG_CPU_SIMD reaches every task: tg-cluster passes its environment on).
           "cpu_simd": os.environ.get("TG_CPU_SIMD", "native: " + ("avx512" if " avx512f" in open("/proc/cpuinfo").read()
                                                                   else "avx2" if " avx2" in open("/proc/cpuinfo").read() else "other"))}
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, result_path)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(write_table(rows, tta, args))
    plot(rows, args.out)
    print(write_table(rows, tta, args))


if __name__ == "__main__":
    main()
