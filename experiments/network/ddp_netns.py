#!/usr/bin/env python3
"""PyTorch DDP across W network namespaces joined by shaped veth links to a
bridge (a switch whose every port runs at --rate): PyTorch's own
communication hooks against the project's TernGrad hooks.

    sudo python3 experiments/network/ddp_netns.py [--world 2] [--rate 1gbit] [--steps 40]
        [--data random|fashion-mnist] [--modes allreduce terngrad ...] [--out DIR]

What it does (root only; without root it stops at once):
  1. removes what earlier runs of this script left behind if their process is
     gone (namespaces tgddp-<pid>-*, veths tgd<pid>*);
  2. creates a namespace per rank (tgddp-<pid>-<rank>) and one for the bridge
     (tgddp-<pid>-br), a veth pair from each rank to the bridge (rank r at
     10.88.0.<r+1>/24), and a tbf qdisc at --rate on both ends of every pair,
     so each rank's upload and download are shaped;
  3. checks the links with a 1-second TCP stream each way between ranks 0
     and 1 (goodput as a share of the rate);
  4. runs W torch.distributed processes (gloo), one in each rank's namespace
     (`ip netns exec`), for a fixed number of steps per hook (--modes):
       allreduce    PyTorch's default all-reduce (no hook)
       fp16         torch's fp16_compress_hook
       powersgd     torch's powerSGD_hook, rank 4 (a failure is recorded)
       terngrad     terngrad.torch.terngrad_hook (all-gather of 2-bit payloads)
       terngrad_rs  terngrad.torch.terngrad_reduce_scatter_hook (sums without decoding)
       ef, ef_rs    the same two with spec ef(terngrad:round=nearest)
       *_bg         terngrad_bg, terngrad_rs_bg, ef_rs_bg: the hook under
                    terngrad.torch.in_background (overlapping the backward pass)
       auto         terngrad_auto_hook with TernGradState(spec="auto"): each bucket
                    fp32, fp16 or ef(terngrad:round=nearest), the link measured
     on random data (an MLP of about 4.2M parameters, labels from a fixed
     teacher) or on Fashion-MNIST (--data fashion-mnist: an MLP of 3.2M
     parameters, each rank its own shard of every global batch; the test
     top-1 after the steps is reported);
  5. reports per-step time, examples/s, the bytes that crossed rank 0's link
     (/sys/class/net/<veth>/statistics, read inside its namespace), and
     writes ddp_netns_<rate>[_w<W>][_<tag>].json and .md into --out;
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
PORT = 29500
MAX_WORLD = 8
MODES = ["allreduce", "fp16", "powersgd", "terngrad", "terngrad_rs", "ef", "ef_rs", "terngrad_rs_bg", "ef_rs_bg",
         "terngrad_bg", "auto"]
EF_SPEC = "ef(terngrad:round=nearest)"
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
PROBE_PORT = 5601
PROBE_SECONDS = 1.0
MAX_STEPS = 1000          # bound on --steps / --warmup
WORKER_TIMEOUT_S = 300    # one mode's workers, start to finish: this much...
STEP_TIMEOUT_S = 3        # ...plus this per step (warm-up, timed and compute-only)
TOTAL_TIMEOUT_S = 1800    # the whole run, plus every mode's per-step allowance


# ---------------------------------------------------------------------------
# Names and shell helpers.

def addr(rank):
    return "10.88.0.%d" % (rank + 1)


def ns_name(pid, side):
    """side: a rank, or "br" for the bridge's namespace."""
    return "%s%d-%s" % (PREFIX, pid, side)


def veth_name(pid, rank, end):
    """end "r": the rank's end, "b": the bridge's. <= 15 characters (IFNAMSIZ) for pids up to 7 digits."""
    return "tgd%d%s%d" % (pid, end, rank)


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
        m = re.fullmatch(re.escape(PREFIX) + r"(\d+)-(\d+|br|a|b)", name)
        if m and not pid_is_ours(int(m.group(1))):
            sh(["ip", "netns", "del", name], check=False)
            removed.append(name)
    r = sh(["ip", "-o", "link", "show"], check=False)
    for line in (r.stdout or "").splitlines()[:10000]:
        m = re.match(r"\d+:\s+(tgd(\d+)(?:[ab]|[rb]\d+))[@:]", line)
        if m and not pid_is_ours(int(m.group(2))):
            # A veth's peer goes with it: the second name of a pair may already be gone.
            if sh(["ip", "link", "del", m.group(1)], check=False).returncode == 0:
                removed.append(m.group(1))
    return removed


# ---------------------------------------------------------------------------
# The link.

class Link:
    """W rank namespaces, each joined to a bridge namespace by a veth pair
    shaped at the rate on both ends; remove() undoes what was done."""

    def __init__(self, pid, world, rate, burst_bytes, latency):
        self.pid, self.world, self.rate, self.burst, self.latency = pid, world, rate, burst_bytes, latency
        self.ns = {r: ns_name(pid, r) for r in range(world)}
        self.bridge_ns = ns_name(pid, "br")
        self.dev = {r: veth_name(pid, r, "r") for r in range(world)}
        self.created = []

    def shape(self, ns, dev):
        if shutil.which("ethtool"):
            # 64 KiB GSO super-packets against a small bucket: tbf would
            # segment them itself, but without them the shaping is per packet.
            r = in_ns(ns, ["ethtool", "-K", dev, "gso", "off", "tso", "off"], check=False)
            self.offloads = "gso/tso off" if r.returncode == 0 else "ethtool failed: " + r.stderr.strip()
        in_ns(ns, ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", str(int(self.rate)) + "bit",
                   "burst", str(self.burst), "latency", self.latency])

    def create(self):
        self.offloads = "unchanged (no ethtool)"
        for name in [self.bridge_ns] + list(self.ns.values()):
            sh(["ip", "netns", "add", name])
            self.created.append(("ns", name))
        in_ns(self.bridge_ns, ["ip", "link", "add", "br0", "type", "bridge"])
        in_ns(self.bridge_ns, ["ip", "link", "set", "br0", "up"])
        for r in range(self.world):
            port = veth_name(self.pid, r, "b")
            # Made inside the bridge's namespace, so nothing of this run lives in the root one.
            in_ns(self.bridge_ns, ["ip", "link", "add", port, "type", "veth", "peer", "name", self.dev[r]])
            in_ns(self.bridge_ns, ["ip", "link", "set", self.dev[r], "netns", self.ns[r]])
            in_ns(self.bridge_ns, ["ip", "link", "set", port, "master", "br0"])
            in_ns(self.bridge_ns, ["ip", "link", "set", port, "up"])
            self.shape(self.bridge_ns, port)  # the rank's download
            in_ns(self.ns[r], ["ip", "addr", "add", addr(r) + "/24", "dev", self.dev[r]])
            in_ns(self.ns[r], ["ip", "link", "set", self.dev[r], "up"])
            in_ns(self.ns[r], ["ip", "link", "set", "lo", "up"])
            self.shape(self.ns[r], self.dev[r])  # its upload
        self.qdisc = in_ns(self.ns[0], ["tc", "qdisc", "show", "dev", self.dev[0]]).stdout.strip()

    def counters(self, rank):
        """tx/rx bytes and packets of a rank's veth end, read inside its namespace."""
        out = {}
        for k in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets"):
            r = in_ns(self.ns[rank], ["cat", "/sys/class/net/%s/statistics/%s" % (self.dev[rank], k)])
            out[k] = int(r.stdout.strip())
        return out

    def tc_stats(self, rank):
        return in_ns(self.ns[rank], ["tc", "-s", "qdisc", "show", "dev", self.dev[rank]]).stdout.strip()

    def remove(self):
        # Deleting a namespace deletes the veth ends inside it, and a veth
        # end's deletion takes its peer with it.
        for kind, name in reversed(self.created):
            if kind == "ns":
                sh(["ip", "netns", "del", name], check=False)
        self.created = []

    def names(self):
        return [self.bridge_ns] + list(self.ns.values())


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


def mlp(dims):
    import torch
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def register_hook(ddp, mode, model, seed):
    """The hook of a mode on the DDP model; returns its state (for byte counts) or None."""
    import torch.distributed.algorithms.ddp_comm_hooks.default_hooks as default_hooks
    import torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook as powersgd
    if mode == "allreduce":
        return None
    if mode == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return None
    if mode == "powersgd":
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=4, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powersgd.powerSGD_hook)
        return None
    import terngrad.torch as tgt
    if mode == "auto":
        state = tgt.TernGradState(spec="auto", seed=1 + seed, module=model)
        ddp.register_comm_hook(state, tgt.terngrad_auto_hook)
        return state
    spec = EF_SPEC if mode.startswith("ef") else "terngrad"
    state = tgt.TernGradState(spec=spec, seed=1 + seed, module=model)
    base = mode[:-3] if mode.endswith("_bg") else mode
    hook = tgt.terngrad_reduce_scatter_hook if base.endswith("_rs") else tgt.terngrad_hook
    ddp.register_comm_hook(state, tgt.in_background(hook) if mode.endswith("_bg") else hook)
    return state


def worker_data(args):
    """(batch(i) -> (x, y) of this rank for step i, test set or None, dims)."""
    import torch
    dims = [int(x) for x in args.dims.split(",")]
    if args.data == "fashion-mnist":
        sys.path.insert(0, os.path.join(REPO, "python", "examples"))
        from ddp_fashion_mnist import load
        x_train, y_train = load(args.data_dir, "train", 60000)
        test = load(args.data_dir, "test", 10000)
        order = torch.Generator().manual_seed(5 + args.seed)  # the same global batches for every hook
        per_epoch = len(x_train) - len(x_train) % (args.batch * args.world)
        perms = {}

        def batch(i):
            """Rank r's shard of global batch i (steps run in order: one permutation kept)."""
            epoch, within = divmod(i * args.batch * args.world, per_epoch)
            if epoch not in perms:
                perms.clear()
                perms[epoch] = torch.randperm(len(x_train), generator=order)
            idx = perms[epoch][within + args.rank * args.batch: within + (args.rank + 1) * args.batch]
            return x_train[idx], y_train[idx]
        return batch, test, [784] + dims[1:]
    torch.manual_seed(12345)
    teacher = torch.nn.Linear(dims[0], dims[-1])  # fixed labels: the loss can fall
    gen = torch.Generator().manual_seed(1000 + args.rank)
    batches = []
    for _ in range(8):  # 8 distinct batches per rank, cycled: data generation stays out of the timing
        x = torch.randn(args.batch, dims[0], generator=gen)
        with torch.no_grad():
            y = teacher(x).argmax(dim=1)
        batches.append((x, y))
    return (lambda i: batches[i % len(batches)]), None, dims


def worker(args):
    """One DDP rank. Writes its measurements as JSON to args.result."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = addr(0)
    os.environ["MASTER_PORT"] = str(PORT)
    os.environ["GLOO_SOCKET_IFNAME"] = args.dev  # gloo binds the shaped veth, not lo
    dist.init_process_group("gloo", rank=args.rank, world_size=args.world, timeout=datetime.timedelta(seconds=120))
    batch, test, dims = worker_data(args)
    torch.manual_seed(args.seed)  # same initial weights on every rank and for every hook
    model = mlp(dims)
    n_params = sum(p.numel() for p in model.parameters())

    # Compute-only reference: forward + backward + SGD step on a local copy, no communication.
    local = mlp(dims)
    local_opt = torch.optim.SGD(local.parameters(), lr=0.01)
    compute = []
    for i in range(args.warmup + args.compute_steps):
        x, y = batch(i)
        t0 = time.perf_counter()
        local_opt.zero_grad()
        torch.nn.functional.cross_entropy(local(x), y).backward()
        local_opt.step()
        if i >= args.warmup:
            compute.append(time.perf_counter() - t0)

    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = register_hook(ddp, args.mode, model, args.seed)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    steps, losses = [], []
    before = None
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            dist.barrier()  # every rank starts the timed steps together
            before = read_counters(args.dev)
            t_start = time.perf_counter()
        x, y = batch(i)
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
    # Replicas must agree (DDP averages the same gradients on every rank).
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    other = [torch.zeros_like(flat) for _ in range(args.world)]
    dist.all_gather(other, flat)
    identical = all(torch.equal(other[0], o) for o in other[1:])
    dist.destroy_process_group()
    accuracy = None
    if test is not None:
        with torch.no_grad():
            accuracy = float((model(test[0]).argmax(1) == test[1]).float().mean())
    out = {"rank": args.rank, "mode": args.mode, "params": n_params, "batch": args.batch, "steps": args.steps,
           "warmup": args.warmup, "step_s": steps, "timed_wall_s": wall, "compute_only_step_s": compute,
           "loss_first": losses[:5], "loss_last": losses[-5:], "tx_bytes": after["tx_bytes"] - before["tx_bytes"],
           "rx_bytes": after["rx_bytes"] - before["rx_bytes"], "replicas_identical": identical,
           "test_top1": accuracy,
           "hook_bytes_per_step": state.bytes_per_step() if state else None,
           "hook_bytes_received_per_step": state.bytes_received / max(state.iteration, 1) if state else None,
           "auto_choices": getattr(state, "choices", None) if state is not None and getattr(state, "auto", False)
           else None}
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
    srv = subprocess.Popen(["ip", "netns", "exec", link.ns[dst]] + me + ["--probe-server", "--bind", addr(dst)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    procs.append(srv)
    cli = subprocess.Popen(["ip", "netns", "exec", link.ns[src]] + me + ["--probe-client", "--connect", addr(dst)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    procs.append(cli)
    cli.wait(timeout=30)
    out, err = srv.communicate(timeout=30)
    if srv.returncode != 0 or cli.returncode != 0:
        raise RuntimeError("throughput probe failed: %s %s" % (err.strip(), cli.stderr.read().strip()))
    r = json.loads(out.strip().splitlines()[-1])
    return r["bytes"] * 8 / r["seconds"] if r["seconds"] > 0 else 0.0


def steps_per_mode(args):
    """The steps one mode's workers run: warm-up, timed and compute-only."""
    return args.warmup + args.steps + args.compute_steps


def mode_timeout_s(args):
    """How long one mode's workers may take, start to finish: a fixed allowance
    for start-up and the evaluation, plus STEP_TIMEOUT_S per step."""
    return WORKER_TIMEOUT_S + STEP_TIMEOUT_S * steps_per_mode(args)


def run_mode(link, mode, args, tmp, procs):
    me = [sys.executable, os.path.abspath(__file__)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["TERNGRAD_LIBRARY"] = args.library
    env["OMP_NUM_THREADS"] = "1"  # the ranks share the machine: one thread each
    before = link.counters(0)
    jiffies0, own0, wall0 = cpu_jiffies(), own_cpu_s(), time.monotonic()
    ranks = []
    for rank in range(args.world):
        result = os.path.join(tmp, "%s-%d.json" % (mode, rank))
        log = open(os.path.join(tmp, "%s-%d.log" % (mode, rank)), "w")
        p = subprocess.Popen(["ip", "netns", "exec", link.ns[rank]] + me +
                             ["--worker", "--rank", str(rank), "--world", str(args.world), "--mode", mode,
                              "--dev", link.dev[rank], "--result", result, "--steps", str(args.steps),
                              "--warmup", str(args.warmup), "--compute-steps", str(args.compute_steps),
                              "--batch", str(args.batch), "--dims", args.dims, "--data", args.data,
                              "--data-dir", args.data_dir, "--lr", str(args.lr), "--seed", str(args.seed)],
                             stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        procs.append(p)
        ranks.append((p, result, log))
    allowed = mode_timeout_s(args)
    deadline = time.monotonic() + allowed
    # Poll all: if one rank fails, the others would wait for it until gloo's
    # timeout, so they are stopped at once.
    while True:
        codes = [p.poll() for p, _, _ in ranks]
        if all(c is not None for c in codes) or any(c not in (None, 0) for c in codes):
            break
        if time.monotonic() > deadline:
            stop([q for q, _, _ in ranks])
            raise WorkerFailed("%s workers did not finish their %d steps within %d s (stopped)"
                               % (mode, steps_per_mode(args), allowed))
        time.sleep(0.2)
    if any(c not in (None, 0) for c in codes):
        stop([q for q, _, _ in ranks])
    for p, result, log in ranks:
        log.close()
    failed = []
    for rank, (p, result, log) in enumerate(ranks):
        if p.returncode != 0:
            with open(log.name) as f:
                text = f.read()
            aborts = [l for l in text.splitlines() if "what():" in l]  # C++ aborts, early in a long log
            failed.append("rank %d (exit %d):\n%s" % (rank, p.returncode, "\n".join(aborts + [text[-3000:]])))
    if failed:
        raise WorkerFailed("%s workers failed: %s" % (mode, "\n".join(failed)))
    after = link.counters(0)
    jiffies1, own1, wall1 = cpu_jiffies(), own_cpu_s(), time.monotonic()
    # CPU time of everything else on the machine while this hook ran, as a
    # share of all cores: other jobs slow the ranks' compute and the timings.
    hz = os.sysconf("SC_CLK_TCK")
    busy_s = (jiffies1[1] - jiffies0[1]) / hz
    others = max(0.0, busy_s - (own1 - own0)) / ((wall1 - wall0) * (os.cpu_count() or 1))
    res = [json.load(open(r)) for _, r, _ in ranks]
    for r in res:
        r["others_cpu_share"] = others
    return res, {k: after[k] - before[k] for k in after}


class WorkerFailed(RuntimeError):
    """A hook's workers failed: recorded as that hook's result, the run goes on."""


def summarize(mode, res, totals, args, rate):
    # A step ends when the slowest rank's step ends: per step, the max over ranks.
    per_step = [max(t) for t in zip(*[r["step_s"] for r in res])]
    mean = statistics.mean(per_step)
    steps = args.steps
    r0 = res[0]
    return {"mode": mode, "steps": steps, "step_mean_s": mean, "step_median_s": statistics.median(per_step),
            "step_min_s": min(per_step), "step_max_s": max(per_step),
            "examples_per_s": args.world * args.batch / mean,
            "examples_per_s_wall": args.world * args.batch * steps / max(r["timed_wall_s"] for r in res),
            "compute_only_step_median_s": statistics.median(sum((r["compute_only_step_s"] for r in res), [])),
            "rank0_link_tx_bytes_per_step": r0["tx_bytes"] / steps, "rank0_link_rx_bytes_per_step": r0["rx_bytes"] / steps,
            "rank0_rx_bits_per_element": 8.0 * r0["rx_bytes"] / steps / r0["params"],
            "link_utilization_busier_direction": max(r0["tx_bytes"], r0["rx_bytes"]) * 8 / steps / mean / rate,
            "hook_bytes_per_step_per_rank": r0["hook_bytes_per_step"],
            "hook_bytes_received_per_step_per_rank": r0["hook_bytes_received_per_step"],
            "rank0_link_bytes_whole_run_incl_setup": totals,
            "loss_first5_rank0": r0["loss_first"], "loss_last5_rank0": r0["loss_last"],
            "test_top1": r0["test_top1"],
            "replicas_identical": all(r["replicas_identical"] for r in res),
            "other_jobs_cpu_share": r0["others_cpu_share"],
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


LABELS = {"allreduce": "all-reduce (PyTorch default)", "fp16": "`fp16_compress_hook` (PyTorch)",
          "powersgd": "`powerSGD_hook`, rank 4 (PyTorch)", "terngrad": "TernGrad, all-gather (`terngrad_hook`)",
          "terngrad_rs": "TernGrad, reduce-scatter (`terngrad_reduce_scatter_hook`)",
          "ef": "`%s`, all-gather" % EF_SPEC, "ef_rs": "`%s`, reduce-scatter" % EF_SPEC,
          "terngrad_bg": "TernGrad, all-gather, `in_background`",
          "terngrad_rs_bg": "TernGrad, reduce-scatter, `in_background`",
          "ef_rs_bg": "`%s`, reduce-scatter, `in_background`" % EF_SPEC,
          "auto": "`TernGradState(spec=\"auto\")`, `terngrad_auto_hook`"}


def write_outputs(doc, out_dir, rate_text, tag=""):
    os.makedirs(out_dir, exist_ok=True)
    world = doc["config"]["world_size"]
    name = "ddp_netns_%s%s%s" % (re.sub(r"[^0-9a-zA-Z.]+", "_", rate_text), "_w%d" % world if world != 2 else "",
                                 "_" + re.sub(r"[^0-9a-zA-Z.]+", "_", tag) if tag else "")
    stem = os.path.join(out_dir, name)
    with open(stem + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    c = doc["config"]
    lines = ["# PyTorch DDP, %d ranks, each on a %s link to a bridge (network namespaces)" % (world, rate_text), "",
             "gloo; MLP %s (%s parameters), %s data, batch %d per rank, %d timed steps after %d warm-up, "
             "SGD lr %g momentum 0.9, seed offset %d. Links: tbf %s on both ends of every rank's veth (burst %d B); TCP probe "
             "goodput rank 0 -> 1 %.0f Mbit/s, 1 -> 0 %.0f Mbit/s. Step = the slowest rank's "
             "forward+backward+step; bytes are what crossed rank 0's link." % (
                 c["dims"], "{:,}".format(c["params"]), c["data"], c["batch"], c["steps"], c["warmup"], c["lr"],
                 c.get("seed", 0),
                 rate_text, doc["link"]["burst_bytes"], doc["link"]["probe_bps"]["0_to_1"] / 1e6,
                 doc["link"]["probe_bps"]["1_to_0"] / 1e6), "",
             "| hook | step median (ms) | examples/s | step vs all-reduce | rank 0 received / step | bits received per parameter | test top-1 | replicas identical | CPU used by other jobs |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|"]
    base = next((r for r in doc["modes"] if r["mode"] == "allreduce" and "error" not in r), None)
    for r in doc["modes"]:
        if "error" in r:
            lines.append("| %s | failed: %s | | | | | | | |" % (LABELS[r["mode"]], r["error"]))
            continue
        lines.append("| %s | %.1f | %.0f | %s | %s B | %.2f | %s | %s | %.0f%% |" % (
            LABELS[r["mode"]], 1e3 * r["step_median_s"], r["examples_per_s"],
            "%.2fx" % (r["step_median_s"] / base["step_median_s"]) if base else "",
            "{:,.0f}".format(r["rank0_link_rx_bytes_per_step"]), r["rank0_rx_bits_per_element"],
            "%.2f%%" % (100 * r["test_top1"]) if r["test_top1"] is not None else "n/a",
            "yes" if r["replicas_identical"] else "NO", 100 * r["other_jobs_cpu_share"]))
    ok = [r for r in doc["modes"] if "error" not in r]
    lines += ["", "Compute-only step (no communication, same model and batch, median): %.1f ms." %
              (1e3 * statistics.median([r["compute_only_step_median_s"] for r in ok])) if ok else "",
              "", "Machine: %s, %d cores; kernel %s; Python %s; PyTorch %s; CPUs %.0f%% busy in the second before "
              "the run; 1-minute load average %.2f before, %.2f after (the run itself adds up to %d). Finished %s. "
              "Command: `%s`." % (
                  doc["environment"]["cpu"], doc["environment"]["cores"], doc["environment"]["kernel"],
                  doc["environment"]["python"], doc["environment"]["torch"],
                  100 * doc["environment"]["cpu_busy_1s_before"], doc["environment"]["load_avg_at_start"][0],
                  doc["environment"]["load_avg_at_end"][0], world, doc["environment"]["date_utc"], doc["command"])]
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
    if not 0 <= args.seed < 2 ** 31:
        print("ddp_netns.py: --seed must be in 0..%d, got %d" % (2 ** 31 - 1, args.seed), file=sys.stderr)
        return 2
    rate = parse_rate(args.rate)
    # Bucket: at least 64 KiB (above a GSO super-packet, so tbf need not split
    # every one) and at least 1 ms of traffic at the rate, which keeps the
    # kernel's timer granularity from capping the throughput.
    burst = max(64 * 1024, int(rate / 8 * 1e-3))
    swept = sweep_leftovers()
    if swept:
        print("removed leftovers of dead runs: %s" % ", ".join(swept))
    if not 2 <= args.world <= MAX_WORLD:
        print("ddp_netns.py: --world must be in 2..%d" % MAX_WORLD, file=sys.stderr)
        return 2
    if args.data == "fashion-mnist" and not os.path.exists(os.path.join(args.data_dir, "t10k-labels-idx1-ubyte.gz")):
        print("ddp_netns.py: Fashion-MNIST not found in %s (Debian: dataset-fashion-mnist)" % args.data_dir,
              file=sys.stderr)
        return 2
    link = Link(os.getpid(), args.world, rate, burst, args.tbf_latency)
    procs = []
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGALRM, on_signal)
    # A hung run still cleans up (SIGALRM -> Interrupted).
    signal.alarm(TOTAL_TIMEOUT_S + len(args.modes) * STEP_TIMEOUT_S * steps_per_mode(args))
    t_start = time.monotonic()
    load_start = os.getloadavg()  # other jobs on the machine disturb timings: recorded
    busy_before = cpu_busy()
    try:
        link.create()
        print("namespaces %s; ranks' veths %s; %s" % (", ".join(link.names()), ", ".join(link.dev.values()),
                                                      link.qdisc))
        probe_bps = {"0_to_1": probe(link, 0, 1, procs), "1_to_0": probe(link, 1, 0, procs)}
        print("TCP probe goodput: 0->1 %.0f Mbit/s, 1->0 %.0f Mbit/s (rate %.0f Mbit/s)" % (
            probe_bps["0_to_1"] / 1e6, probe_bps["1_to_0"] / 1e6, rate / 1e6))
        low = min(probe_bps.values()) < 0.85 * rate
        if low:
            print("WARNING: goodput below 85% of the rate; results are reported anyway, flagged")
        modes = []
        with tempfile.TemporaryDirectory(prefix="tgddp-") as tmp:
            os.chmod(tmp, 0o755)
            params = None
            for mode in args.modes:
                print("running %s: %d warm-up + %d timed steps ..." % (mode, args.warmup, args.steps), flush=True)
                try:
                    res, totals = run_mode(link, mode, args, tmp, procs)
                except WorkerFailed as e:
                    lines = [l.strip() for l in str(e).splitlines() if l.strip()]
                    # The exception's own line (Python's, or TorchScript's "RuntimeError: ..."), else the last.
                    # A C++ abort (gloo's EnforceNotMet) says what() and nothing in Python.
                    errors = [l for l in lines if re.match(r"^([A-Za-z_.]*(Error|Exception)\b|what\(\):)", l)]
                    # A rank that fails drops its connections: the others' "Connection reset" is a consequence.
                    causes = [l for l in errors if "Connection reset" not in l and "Connection closed" not in l]
                    last = (causes or errors or lines)[-1]
                    print("  %s failed: %s\n%s" % (mode, last, "\n".join("    " + l for l in str(e).splitlines()[-60:])))
                    modes.append({"mode": mode, "error": last[:300]})
                    continue
                s = summarize(mode, res, totals, args, rate)
                params = res[0]["params"]
                modes.append(s)
                print("  %s: step median %.1f ms, %.0f examples/s, rank 0 received %.0f B/step (%.2f bits/param), "
                      "top-1 %s" % (mode, 1e3 * s["step_median_s"], s["examples_per_s"],
                                    s["rank0_link_rx_bytes_per_step"], s["rank0_rx_bits_per_element"],
                                    s["test_top1"]), flush=True)
        doc = {"config": {"rate": args.rate, "rate_bps": rate, "steps": args.steps, "warmup": args.warmup,
                          "batch": args.batch, "dims": args.dims, "params": params, "world_size": args.world,
                          "data": args.data, "lr": args.lr, "seed": args.seed, "backend": "gloo",
                          "library": args.library},
               "link": {"namespaces": link.names(), "veth": link.dev, "addresses": [addr(r) for r in range(args.world)],
                        "burst_bytes": burst, "tbf_latency": args.tbf_latency, "offloads": link.offloads,
                        "qdisc": link.qdisc, "probe_bps": probe_bps, "probe_below_85pct": low,
                        "tc_stats_after": {r: link.tc_stats(r) for r in range(args.world)}},
               "command": " ".join(["python3", "experiments/network/ddp_netns.py"] + sys.argv[1:]),
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
        left = [n for n in link.names() if n in sh(["ip", "netns", "list"], check=False).stdout]
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
                    help="MLP layer widths (default 1024,2048,1024,10: 4,206,602 parameters; with Fashion-MNIST "
                         "the first is 784)")
    ap.add_argument("--world", type=int, default=2, help="ranks, each in its own namespace (2..%d)" % MAX_WORLD)
    ap.add_argument("--data", default="random", choices=["random", "fashion-mnist"])
    ap.add_argument("--data-dir", default=FASHION_MNIST)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0,
                    help="offsets the initial weights', the data order's and the codec's seeds (0: the ones "
                         "every earlier result used)")
    ap.add_argument("--modes", nargs="+", default=["allreduce", "terngrad"], choices=MODES)
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
