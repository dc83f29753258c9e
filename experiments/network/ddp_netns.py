#!/usr/bin/env python3
"""PyTorch DDP across two network namespaces joined by a shaped veth link:
default all-reduce against the project's TernGrad communication hook.

    sudo python3 experiments/network/ddp_netns.py [--rate 1gbit] [--steps 40] [--out DIR]

What it does (root only; without root it stops at once):
  1. removes what earlier runs of this script left behind if their process is
     gone (namespaces tgddp-<pid>-a/b, veth tgd<pid>a/b);
  2. creates namespaces tgddp-<pid>-a and tgddp-<pid>-b, a veth pair between
     them (10.88.0.1/24 and 10.88.0.2/24), and a tbf qdisc at --rate on both
     veth ends, so both directions are shaped;
  3. checks the link with a 1-second TCP stream each way (goodput as a share
     of the rate; the tbf burst is chosen so that it reaches >= 85%);
  4. runs two torch.distributed processes (gloo, world size 2), one in each
     namespace (`ip netns exec`), training an MLP of about 4.2M parameters on
     random data for a fixed number of steps: once with PyTorch's default
     all-reduce, once with terngrad.torch.terngrad_hook;
  5. reports per-step time, examples/s, the bytes that crossed the link
     (/sys/class/net/<veth>/statistics, read inside each namespace), and
     writes ddp_netns_<rate>.json and .md into --out;
  6. removes everything it created on exit, on failure, and on Ctrl-C/SIGTERM.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
PREFIX = "tgddp-"
ADDR = {"a": "10.88.0.1", "b": "10.88.0.2"}
PORT = 29500
PROBE_PORT = 5601
PROBE_SECONDS = 1.0
MAX_STEPS = 1000          # bound on --steps / --warmup
WORKER_TIMEOUT_S = 240    # one mode's two workers, start to finish
TOTAL_TIMEOUT_S = 900     # the whole run


# ---------------------------------------------------------------------------
# Names and shell helpers.

def ns_name(pid, side):
    return "%s%d-%s" % (PREFIX, pid, side)


def veth_name(pid, side):
    return "tgd%d%s" % (pid, side)  # <= 15 characters (IFNAMSIZ) for pids up to 10 digits


def sh(args, check=True, timeout=30, capture=True):
    r = subprocess.run(args, capture_output=capture, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(args), r.returncode, (r.stderr or "").strip()))
    return r


def in_ns(ns, args, **kw):
    return sh(["ip", "netns", "exec", ns] + args, **kw)


def parse_rate(text):
    """tc rate syntax (bit units are decimal: 1gbit = 1e9 bit/s) -> bit/s."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(bit|kbit|mbit|gbit|tbit)?\s*", text.lower())
    if not m:
        raise ValueError("rate %r: use e.g. 1gbit, 500mbit or a number of bit/s" % text)
    return float(m.group(1)) * {None: 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}[m.group(2)]


def pid_is_ours(pid):
    """True if pid is a live process running this script (so its namespaces are in use)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return b"ddp_netns.py" in f.read()
    except OSError:
        return False


def sweep_leftovers():
    """Delete namespaces and root-namespace veths of earlier runs whose process
    is gone. Only names this script makes are touched."""
    removed = []
    r = sh(["ip", "netns", "list"], check=False)
    for line in (r.stdout or "").splitlines()[:10000]:
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(re.escape(PREFIX) + r"(\d+)-[ab]", name)
        if m and not pid_is_ours(int(m.group(1))):
            sh(["ip", "netns", "del", name], check=False)
            removed.append(name)
    r = sh(["ip", "-o", "link", "show"], check=False)
    for line in (r.stdout or "").splitlines()[:10000]:
        m = re.match(r"\d+:\s+(tgd(\d+)[ab])[@:]", line)
        if m and not pid_is_ours(int(m.group(2))):
            # A veth's peer goes with it: the second name of a pair may already be gone.
            if sh(["ip", "link", "del", m.group(1)], check=False).returncode == 0:
                removed.append(m.group(1))
    return removed


# ---------------------------------------------------------------------------
# The link.

class Link:
    """Two namespaces and a shaped veth pair; remove() undoes what was done."""

    def __init__(self, pid, rate, burst_bytes, latency):
        self.pid, self.rate, self.burst, self.latency = pid, rate, burst_bytes, latency
        self.ns = {s: ns_name(pid, s) for s in "ab"}
        self.dev = {s: veth_name(pid, s) for s in "ab"}
        self.created = []

    def create(self):
        for s in "ab":
            sh(["ip", "netns", "add", self.ns[s]])
            self.created.append(("ns", self.ns[s]))
        sh(["ip", "link", "add", self.dev["a"], "type", "veth", "peer", "name", self.dev["b"]])
        self.created.append(("link", self.dev["a"]))
        offloads = "unchanged (no ethtool)"
        for s in "ab":
            sh(["ip", "link", "set", self.dev[s], "netns", self.ns[s]])
            in_ns(self.ns[s], ["ip", "addr", "add", ADDR[s] + "/24", "dev", self.dev[s]])
            in_ns(self.ns[s], ["ip", "link", "set", self.dev[s], "up"])
            in_ns(self.ns[s], ["ip", "link", "set", "lo", "up"])
            if shutil.which("ethtool"):
                # 64 KiB GSO super-packets against a small bucket: tbf would
                # segment them itself, but without them the shaping is per packet.
                r = in_ns(self.ns[s], ["ethtool", "-K", self.dev[s], "gso", "off", "tso", "off"], check=False)
                offloads = "gso/tso off" if r.returncode == 0 else "ethtool failed: " + r.stderr.strip()
            in_ns(self.ns[s], ["tc", "qdisc", "add", "dev", self.dev[s], "root", "tbf", "rate", str(int(self.rate)) + "bit",
                               "burst", str(self.burst), "latency", self.latency])
        self.offloads = offloads
        self.qdisc = in_ns(self.ns["a"], ["tc", "qdisc", "show", "dev", self.dev["a"]]).stdout.strip()

    def counters(self, side):
        """tx/rx bytes and packets of one veth end, read inside its namespace."""
        out = {}
        for k in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets"):
            r = in_ns(self.ns[side], ["cat", "/sys/class/net/%s/statistics/%s" % (self.dev[side], k)])
            out[k] = int(r.stdout.strip())
        return out

    def tc_stats(self, side):
        return in_ns(self.ns[side], ["tc", "-s", "qdisc", "show", "dev", self.dev[side]]).stdout.strip()

    def remove(self):
        # Deleting a namespace deletes the veth end inside it, and a veth
        # end's deletion takes its peer with it.
        for kind, name in reversed(self.created):
            if kind == "ns":
                sh(["ip", "netns", "del", name], check=False)
            elif kind == "link":
                sh(["ip", "link", "del", name], check=False, timeout=10)
        self.created = []


# ---------------------------------------------------------------------------
# Worker-side helpers (run inside a namespace through `ip netns exec`).

def probe_server(args):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((args.bind, PROBE_PORT))
    s.listen(1)
    s.settimeout(20)
    c, _ = s.accept()
    c.settimeout(20)
    n, t0, t1 = 0, None, None
    deadline = time.monotonic() + PROBE_SECONDS + 15
    while time.monotonic() < deadline:
        d = c.recv(1 << 20)
        if not d:
            break
        if t0 is None:
            t0 = time.perf_counter()
        n += len(d)
        t1 = time.perf_counter()
    print(json.dumps({"bytes": n, "seconds": (t1 - t0) if t0 and t1 else 0.0}))


def probe_client(args):
    deadline = time.monotonic() + 10
    while True:  # the server may not listen yet: retry for up to 10 s
        try:
            c = socket.create_connection((args.connect, PROBE_PORT), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    buf = b"\0" * (1 << 20)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < PROBE_SECONDS:
        c.sendall(buf)
    c.close()


def read_counters(dev):
    base = "/sys/class/net/%s/statistics/" % dev
    out = {}
    for k in ("tx_bytes", "rx_bytes"):
        with open(base + k) as f:
            out[k] = int(f.read())
    return out


def worker(args):
    """One DDP rank. Writes its measurements as JSON to args.result."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = ADDR["a"]
    os.environ["MASTER_PORT"] = str(PORT)
    os.environ["GLOO_SOCKET_IFNAME"] = args.dev  # gloo binds the shaped veth, not lo
    dist.init_process_group("gloo", rank=args.rank, world_size=2, timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)  # same initial weights on both ranks
    dims = [int(x) for x in args.dims.split(",")]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    n_params = sum(p.numel() for p in model.parameters())
    teacher = torch.nn.Linear(dims[0], dims[-1])  # fixed labels from seed 0: the loss can fall
    gen = torch.Generator().manual_seed(1000 + args.rank)
    batches = []
    for _ in range(8):  # 8 distinct batches per rank, cycled: data generation stays out of the timing
        x = torch.randn(args.batch, dims[0], generator=gen)
        with torch.no_grad():
            y = teacher(x).argmax(dim=1)
        batches.append((x, y))

    # Compute-only reference: forward + backward + SGD step on a local copy, no communication.
    local = torch.nn.Sequential(*[type(m)(m.in_features, m.out_features) if isinstance(m, torch.nn.Linear)
                                  else torch.nn.ReLU() for m in layers])
    local_opt = torch.optim.SGD(local.parameters(), lr=0.01)
    compute = []
    for i in range(args.warmup + args.compute_steps):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        local_opt.zero_grad()
        torch.nn.functional.cross_entropy(local(x), y).backward()
        local_opt.step()
        if i >= args.warmup:
            compute.append(time.perf_counter() - t0)

    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = None
    if args.mode == "terngrad":
        import terngrad.torch as tgt
        state = tgt.TernGradState(seed=1)
        ddp.register_comm_hook(state, tgt.terngrad_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    steps, losses = [], []
    before = None
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            dist.barrier()  # both ranks start the timed steps together
            before = read_counters(args.dev)
            t_start = time.perf_counter()
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(float(loss))
        if i >= args.warmup:
            steps.append(dt)
    wall = time.perf_counter() - t_start
    after = read_counters(args.dev)
    dist.barrier()
    # Replicas must agree (DDP averages the same gradients on both ranks).
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    other = [torch.zeros_like(flat) for _ in range(2)]
    dist.all_gather(other, flat)
    identical = bool(torch.equal(other[0], other[1]))
    dist.destroy_process_group()
    out = {"rank": args.rank, "mode": args.mode, "params": n_params, "batch": args.batch, "steps": args.steps,
           "warmup": args.warmup, "step_s": steps, "timed_wall_s": wall, "compute_only_step_s": compute,
           "loss_first": losses[:5], "loss_last": losses[-5:], "tx_bytes": after["tx_bytes"] - before["tx_bytes"],
           "rx_bytes": after["rx_bytes"] - before["rx_bytes"], "replicas_identical": identical,
           "hook_bytes_per_step": state.bytes_per_step() if state else 4.0 * n_params}
    with open(args.result, "w") as f:
        json.dump(out, f)


# ---------------------------------------------------------------------------
# The driver.

def cpu_jiffies():
    """(total, busy) jiffies of all CPUs since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), sum(v) - v[3] - v[4]


def own_cpu_s():
    """CPU seconds of this process and its waited-for children."""
    import resource
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def cpu_busy(seconds=1.0):
    """Share of all cores busy over `seconds` (/proc/stat), to record whether
    other jobs were running when the timings were taken."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = snap()
    time.sleep(seconds)
    t1, i1 = snap()
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


class Interrupted(Exception):
    pass


def on_signal(signum, frame):
    raise Interrupted("signal %d" % signum)


def stop(procs):
    """Terminate worker processes this run started (each in its own session), by pid."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=5)


def probe(link, src, dst, procs):
    """Goodput of a 1-second TCP stream src -> dst, bit/s."""
    me = [sys.executable, os.path.abspath(__file__)]
    srv = subprocess.Popen(["ip", "netns", "exec", link.ns[dst]] + me + ["--probe-server", "--bind", ADDR[dst]],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    procs.append(srv)
    cli = subprocess.Popen(["ip", "netns", "exec", link.ns[src]] + me + ["--probe-client", "--connect", ADDR[dst]],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    procs.append(cli)
    cli.wait(timeout=30)
    out, err = srv.communicate(timeout=30)
    if srv.returncode != 0 or cli.returncode != 0:
        raise RuntimeError("throughput probe failed: %s %s" % (err.strip(), cli.stderr.read().strip()))
    r = json.loads(out.strip().splitlines()[-1])
    return r["bytes"] * 8 / r["seconds"] if r["seconds"] > 0 else 0.0


def run_mode(link, mode, args, tmp, procs):
    me = [sys.executable, os.path.abspath(__file__)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["TERNGRAD_LIBRARY"] = args.library
    env["OMP_NUM_THREADS"] = "1"  # two ranks share the machine: one thread each
    before = {s: link.counters(s) for s in "ab"}
    jiffies0, own0, wall0 = cpu_jiffies(), own_cpu_s(), time.monotonic()
    ranks = []
    for rank, side in enumerate("ab"):
        result = os.path.join(tmp, "%s-%d.json" % (mode, rank))
        log = open(os.path.join(tmp, "%s-%d.log" % (mode, rank)), "w")
        p = subprocess.Popen(["ip", "netns", "exec", link.ns[side]] + me +
                             ["--worker", "--rank", str(rank), "--mode", mode, "--dev", link.dev[side],
                              "--result", result, "--steps", str(args.steps), "--warmup", str(args.warmup),
                              "--compute-steps", str(args.compute_steps), "--batch", str(args.batch),
                              "--dims", args.dims],
                             stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        procs.append(p)
        ranks.append((p, result, log))
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    # Poll both: if one rank fails, the other would wait for it until gloo's
    # timeout, so it is stopped at once.
    while True:
        codes = [p.poll() for p, _, _ in ranks]
        if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
            break
        if time.monotonic() > deadline:
            stop([q for q, _, _ in ranks])
            raise RuntimeError("%s workers did not finish within %d s" % (mode, WORKER_TIMEOUT_S))
        time.sleep(0.2)
    if any(c not in (None, 0) for c in codes):
        stop([q for q, _, _ in ranks])
    for p, result, log in ranks:
        log.close()
    for p, result, log in ranks:
        if p.returncode != 0:
            with open(log.name) as f:
                tail = f.read()[-3000:]
            raise RuntimeError("%s worker failed (exit %d):\n%s" % (mode, p.returncode, tail))
    after = {s: link.counters(s) for s in "ab"}
    jiffies1, own1, wall1 = cpu_jiffies(), own_cpu_s(), time.monotonic()
    # CPU time of everything else on the machine while this hook ran, as a
    # share of all cores: other jobs slow the ranks' compute and the timings.
    hz = os.sysconf("SC_CLK_TCK")
    busy_s = (jiffies1[1] - jiffies0[1]) / hz
    others = max(0.0, busy_s - (own1 - own0)) / ((wall1 - wall0) * (os.cpu_count() or 1))
    res = [json.load(open(r)) for _, r, _ in ranks]
    for r in res:
        r["others_cpu_share"] = others
    return res, {s: {k: after[s][k] - before[s][k] for k in after[s]} for s in "ab"}


def summarize(mode, res, totals, args, rate):
    # A step ends when the slower rank's step ends: per step, the max over ranks.
    per_step = [max(a, b) for a, b in zip(res[0]["step_s"], res[1]["step_s"])]
    mean = statistics.mean(per_step)
    steps = args.steps
    link_bytes = res[0]["tx_bytes"] + res[0]["rx_bytes"]  # rank 0's veth: both directions of the one link
    return {"mode": mode, "steps": steps, "step_mean_s": mean, "step_median_s": statistics.median(per_step),
            "step_min_s": min(per_step), "step_max_s": max(per_step),
            "examples_per_s": 2 * args.batch / mean,
            "examples_per_s_wall": 2 * args.batch * steps / max(r["timed_wall_s"] for r in res),
            "compute_only_step_median_s": statistics.median(res[0]["compute_only_step_s"] + res[1]["compute_only_step_s"]),
            "link_bytes_per_step_a_to_b": res[0]["tx_bytes"] / steps, "link_bytes_per_step_b_to_a": res[0]["rx_bytes"] / steps,
            "link_bytes_per_step_total": link_bytes / steps,
            "link_utilization_busier_direction": max(res[0]["tx_bytes"], res[0]["rx_bytes"]) * 8 / steps / mean / rate,
            "hook_bytes_per_step_per_rank": res[0]["hook_bytes_per_step"],
            "link_bytes_whole_run_incl_setup": {s: totals[s] for s in "ab"},
            "loss_first5_rank0": res[0]["loss_first"], "loss_last5_rank0": res[0]["loss_last"],
            "replicas_identical": res[0]["replicas_identical"] and res[1]["replicas_identical"],
            "other_jobs_cpu_share": res[0]["others_cpu_share"],
            "per_rank_step_s": [r["step_s"] for r in res]}


def environment():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    import torch
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
            "torch": torch.__version__, "load_avg_at_end": os.getloadavg(),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def write_outputs(doc, out_dir, rate_text, tag=""):
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, "ddp_netns_%s%s" % (re.sub(r"[^0-9a-zA-Z.]+", "_", rate_text),
                                                      "_" + re.sub(r"[^0-9a-zA-Z.]+", "_", tag) if tag else ""))
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    m = {r["mode"]: r for r in doc["modes"]}
    lines = ["# PyTorch DDP over a %s veth link between two network namespaces" % rate_text, "",
             "2 ranks (gloo), MLP %s (%s parameters), batch %d per rank, %d timed steps after %d warm-up, "
             "SGD momentum 0.9, random data. Link: tbf %s on both veth ends (burst %d B); TCP probe goodput "
             "%.0f / %.0f Mbit/s (a->b / b->a). Step = the slower rank's forward+backward+step." % (
                 doc["config"]["dims"], "{:,}".format(doc["config"]["params"]), doc["config"]["batch"],
                 doc["config"]["steps"], doc["config"]["warmup"], rate_text, doc["link"]["burst_bytes"],
                 doc["link"]["probe_bps"]["a_to_b"] / 1e6, doc["link"]["probe_bps"]["b_to_a"] / 1e6), "",
             "| hook | step mean (ms) | step median (ms) | examples/s | link bytes/step (a->b, b->a) | busier direction, share of rate | vs all-reduce | replicas identical | CPU used by other jobs |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    base = m.get("allreduce")
    for mode in ("allreduce", "terngrad"):
        r = m.get(mode)
        if not r:
            continue
        lines.append("| %s | %.1f | %.1f | %.0f | %s / %s | %.2f | %s | %s | %.0f%% |" % (
            "all-reduce (PyTorch default)" if mode == "allreduce" else "TernGrad (`terngrad_hook`)",
            1e3 * r["step_mean_s"], 1e3 * r["step_median_s"], r["examples_per_s"],
            "{:,.0f}".format(r["link_bytes_per_step_a_to_b"]), "{:,.0f}".format(r["link_bytes_per_step_b_to_a"]),
            r["link_utilization_busier_direction"],
            "%.2fx faster, %.1fx fewer bytes" % (base["step_mean_s"] / r["step_mean_s"],
                                                base["link_bytes_per_step_total"] / r["link_bytes_per_step_total"])
            if base and mode != "allreduce" else "1.00x",
            "yes" if r["replicas_identical"] else "NO", 100 * r["other_jobs_cpu_share"]))
    lines += ["", "Compute-only step (no communication, same model and batch, median): %.1f ms." %
              (1e3 * statistics.median([r["compute_only_step_median_s"] for r in doc["modes"]])),
              "", "Machine: %s, %d cores; kernel %s; Python %s; PyTorch %s; CPUs %.0f%% busy in the second before "
              "the run; 1-minute load average %.2f before, %.2f after (the run itself adds up to 2). Finished %s." % (
                  doc["environment"]["cpu"], doc["environment"]["cores"], doc["environment"]["kernel"],
                  doc["environment"]["python"], doc["environment"]["torch"],
                  100 * doc["environment"]["cpu_busy_1s_before"], doc["environment"]["load_avg_at_start"][0], doc["environment"]["load_avg_at_end"][0],
                  doc["environment"]["date_utc"])]
    with open(stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    return stem


def driver(args):
    if os.geteuid() != 0:
        print("ddp_netns.py: needs root (network namespaces, veth, tc); run it with sudo. Nothing was changed.",
              file=sys.stderr)
        return 77
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            print("ddp_netns.py: %s not found (Debian: iproute2)" % tool, file=sys.stderr)
            return 77
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print("ddp_netns.py: %s cannot import torch (%s); Debian: python3-torch" % (sys.executable, e), file=sys.stderr)
        return 77
    args.library = os.environ.get("TERNGRAD_LIBRARY") or os.path.join(REPO, "build", "comm", "capi", "libterngrad.so.0.1")
    if not os.path.exists(args.library):
        print("ddp_netns.py: %s not found; build it (cmake --build build --target terngrad_capi) or set "
              "TERNGRAD_LIBRARY" % args.library, file=sys.stderr)
        return 2
    for name, v in (("--steps", args.steps), ("--warmup", args.warmup), ("--compute-steps", args.compute_steps)):
        if not 1 <= v <= MAX_STEPS:
            print("ddp_netns.py: %s must be in 1..%d" % (name, MAX_STEPS), file=sys.stderr)
            return 2
    rate = parse_rate(args.rate)
    # Bucket: at least 64 KiB (above a GSO super-packet, so tbf need not split
    # every one) and at least 1 ms of traffic at the rate, which keeps the
    # kernel's timer granularity from capping the throughput.
    burst = max(64 * 1024, int(rate / 8 * 1e-3))
    swept = sweep_leftovers()
    if swept:
        print("removed leftovers of dead runs: %s" % ", ".join(swept))
    link = Link(os.getpid(), rate, burst, args.tbf_latency)
    procs = []
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGALRM, on_signal)
    signal.alarm(TOTAL_TIMEOUT_S)  # a hung run still cleans up (SIGALRM -> Interrupted)
    t_start = time.monotonic()
    load_start = os.getloadavg()  # other jobs on the machine disturb timings: recorded
    busy_before = cpu_busy()
    try:
        link.create()
        print("namespaces %s, %s; veth %s <-> %s; %s" % (link.ns["a"], link.ns["b"], link.dev["a"], link.dev["b"],
                                                      link.qdisc))
        probe_bps = {"a_to_b": probe(link, "a", "b", procs), "b_to_a": probe(link, "b", "a", procs)}
        print("TCP probe goodput: a->b %.0f Mbit/s, b->a %.0f Mbit/s (rate %.0f Mbit/s)" % (
            probe_bps["a_to_b"] / 1e6, probe_bps["b_to_a"] / 1e6, rate / 1e6))
        low = min(probe_bps.values()) < 0.85 * rate
        if low:
            print("WARNING: goodput below 85% of the rate; results are reported anyway, flagged")
        modes = []
        with tempfile.TemporaryDirectory(prefix="tgddp-") as tmp:
            os.chmod(tmp, 0o755)
            for mode in args.modes:
                print("running %s: %d warm-up + %d timed steps ..." % (mode, args.warmup, args.steps), flush=True)
                res, totals = run_mode(link, mode, args, tmp, procs)
                s = summarize(mode, res, totals, args, rate)
                modes.append(s)
                print("  %s: step %.1f ms (median %.1f), %.0f examples/s, %.0f link bytes/step" % (
                    mode, 1e3 * s["step_mean_s"], 1e3 * s["step_median_s"], s["examples_per_s"],
                    s["link_bytes_per_step_total"]))
            params = res[0]["params"]
        doc = {"config": {"rate": args.rate, "rate_bps": rate, "steps": args.steps, "warmup": args.warmup,
                          "batch": args.batch, "dims": args.dims, "params": params, "world_size": 2,
                          "backend": "gloo", "library": args.library},
               "link": {"namespaces": link.ns, "veth": link.dev, "addresses": ADDR, "burst_bytes": burst,
                        "tbf_latency": args.tbf_latency, "offloads": link.offloads, "qdisc": link.qdisc,
                        "probe_bps": probe_bps, "probe_below_85pct": low,
                        "tc_stats_after": {s: link.tc_stats(s) for s in "ab"}},
               "modes": modes, "run_seconds": time.monotonic() - t_start,
               "environment": dict(environment(), load_avg_at_start=load_start, cpu_busy_1s_before=busy_before)}
        stem = write_outputs(doc, args.out, args.rate, args.tag)
        print(open(stem + ".md").read())
        print("wrote %s.json and %s.md" % (stem, stem))
        return 0
    except Interrupted as e:
        print("ddp_netns.py: interrupted (%s); cleaning up" % e, file=sys.stderr)
        return 130
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
        print("ddp_netns.py: %s" % e, file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
        # Ignore further signals while cleaning up, so a second Ctrl-C cannot leave half of it.
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        stop(procs)
        link.remove()
        left = [n for n in link.ns.values() if n in sh(["ip", "netns", "list"], check=False).stdout]
        if left:
            print("ddp_netns.py: could not remove %s" % ", ".join(left), file=sys.stderr)
        for s, h in old.items():
            signal.signal(s, h)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--rate", default="1gbit", help="tbf rate on both veth ends (tc syntax; default 1gbit)")
    ap.add_argument("--tbf-latency", default="50ms", help="tbf queue limit as latency (default 50ms)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per hook (default 30)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compute-steps", type=int, default=10, help="compute-only reference steps")
    ap.add_argument("--batch", type=int, default=16,
                    help="examples per rank and step (default 16: on a 2-core CPU a larger batch makes the step compute-bound)")
    ap.add_argument("--dims", default="1024,2048,1024,10",
                    help="MLP layer widths (default 1024,2048,1024,10: 4,206,602 parameters)")
    ap.add_argument("--modes", nargs="+", default=["allreduce", "terngrad"], choices=["allreduce", "terngrad"])
    ap.add_argument("--out", default=os.path.join(REPO, "experiments", "results", "network", "ddp"))
    ap.add_argument("--tag", default="", help="suffix of the output names (default none: ddp_netns_<rate>.json/.md)")
    # Internal: what runs inside the namespaces.
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--dev", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--probe-server", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--probe-client", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bind", help=argparse.SUPPRESS)
    ap.add_argument("--connect", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args) or 0
    if args.probe_server:
        return probe_server(args) or 0
    if args.probe_client:
        return probe_client(args) or 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
