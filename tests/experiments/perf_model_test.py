#!/usr/bin/env python3
"""experiments/network/perf_model.py: payload sizes, link loads, and the fit
recovering known parameters from SYNTHETIC rows the model generated itself
(noise-free: exactly; 1% noise: within a few standard errors); the CLI's
fit and paper commands end to end. Exits 77 (ctest's skip) without
numpy/matplotlib.
"""
import csv
import json
import os
import subprocess
import sys
import tempfile

try:
    import matplotlib  # noqa: F401
    import numpy  # noqa: F401
except ImportError as e:
    print("SKIP: %s cannot import matplotlib/numpy (%s)" % (sys.executable, e))
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "experiments", "network", "perf_model.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import perf_model as pm  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def close(a, b, rel):
    return abs(a - b) <= rel * abs(b)


# Payload sizes: the project's codecs (terngrad.Codec(spec).payload_bytes(1000)
# gives fp32 4016, fp16 2016, terngrad 290) and ternary_sum.h's bit widths
# (3 bits for 2 workers, 4 for 4, 5 for 8; 11 for 512).
check(pm.variable_bytes("fp32", 1000, 4) == (4016, 4016), "fp32 payload 16 + 4n both ways")
check(pm.variable_bytes("fp16", 1000, 4) == (2016, 4016), "fp16 push 16 + 2n, fp32 pull")
check(pm.variable_bytes("terngrad", 1000, 1)[0] == 290, "terngrad push 40 + ceil(n/4)")
check([pm.sum_bits(r) for r in (1, 2, 4, 8, 512)] == [2, 3, 4, 5, 11], "sum bits = bit_width(2R)")
check(pm.variable_bytes("terngrad", 1000, 8)[1] == 40 + 625, "terngrad pull of 8 workers: 5 bits")
check(pm.variable_bytes("terngrad", 100, 8, float_below=101) == (416, 416), "small variables stay fp32")
check(sum(pm.alexnet_sizes()) == 60965224, "AlexNet 60,965,224 parameters")
check(sum(pm.vgg_a_sizes()) == 132863336, "VGG-A 132,863,336 parameters")
check(6.5e6 < sum(pm.googlenet_sizes()) < 7.1e6, "GoogLeNet about 6.8-7.0M parameters")

# Link loads.
links = pm.link_loads(8, 2, 1000.0, 3000.0)
ps = [x for x in links if x["name"] == "ps link"][0]
check(ps["bytes_in"] == 4000 and ps["bytes_out"] == 12000 and ps["msgs_in"] == 8,
      "dedicated ps link carries W*push/P in, W*pull/P out, W messages")
co = pm.link_loads(16, 4, 1000.0, 3000.0, gpus_per_node=4, layout="colocated")
node = [x for x in co if x["kind"] == "net"][0]
check(close(node["bytes_in"], 4 * 3 / 4 * 4000, 1e-12) and close(node["bytes_out"], node["bytes_in"], 1e-12),
      "colocated node link: G*(N-1)/N*(push+pull) each way")
check(pm.link_loads(4, 4, 1.0, 1.0, gpus_per_node=4, layout="colocated")[0]["kind"] == "intra",
      "one node: no network link, only the intra-node uplink")
# Node aggregation: TernGrad pushes 4-bit sums of 4 GPUs, pulls bit_width(2W) bits.
nw, ng, push, pull, gpu_push = pm.network_side("terngrad", [4000], 16, 4, "sum", 0)
check((nw, ng, push, pull, gpu_push) == (4, 1, 40 + 2000, 40 + 3000, 40 + 1000), "node sum payloads (4 + 6 bits)")

# Fit: noise-free synthetic rows give the parameters back exactly.
rows = pm.synth_rows(efficiency=0.8, overhead=3e-4, noise=0.0, seed=3)
for i, r in enumerate(rows, 1):
    r["row"] = i
p = pm.fit(rows)
check(close(p["efficiency"], 0.8, 1e-6) and close(p["msg_overhead_s"], 3e-4, 1e-5),
      "noise-free fit recovers efficiency 0.8, overhead 3e-4 (got %.6f, %.4g)" % (p["efficiency"], p["msg_overhead_s"]))
res = pm.residuals(rows, p)
check(pm.summary_stats(res)["max_relative"] < 1e-6, "noise-free residuals vanish")
# With overlap: 0.5 recovered on the 0.05 grid.
rows = pm.synth_rows(efficiency=0.7, overhead=1e-4, noise=0.0, seed=3, overlap=0.5)
for i, r in enumerate(rows, 1):
    r["row"] = i
p = pm.fit(rows, fit_overlap=True)
check(p["overlap"] == 0.5 and close(p["efficiency"], 0.7, 1e-4) and close(p["msg_overhead_s"], 1e-4, 1e-3),
      "fit with overlap recovers 0.5 / 0.7 / 1e-4 (got %.2f, %.5f, %.4g)" % (p["overlap"], p["efficiency"],
                                                                         p["msg_overhead_s"]))
# 1% noise: within 4 standard errors, and the residuals are about the noise.
rows = pm.synth_rows(efficiency=0.9, overhead=2e-4, noise=0.01, seed=7)
for i, r in enumerate(rows, 1):
    r["row"] = i
p = pm.fit(rows)
check(abs(p["efficiency"] - 0.9) < 4 * p["efficiency_se"] + 1e-9, "noisy fit: efficiency %.4f +- %.4f vs 0.9" %
      (p["efficiency"], p["efficiency_se"]))
check(abs(p["msg_overhead_s"] - 2e-4) < 4 * p["msg_overhead_s_se"] + 1e-12, "noisy fit: overhead %.3g +- %.2g vs 2e-4" %
      (p["msg_overhead_s"], p["msg_overhead_s_se"]))
rms = pm.summary_stats(pm.residuals(rows, p))["rms_relative"]
check(0.005 < rms < 0.02, "noisy fit: RMS relative residual %.4f is about the 1%% noise" % rms)

# A ps link shaped slower than the workers' links becomes the bottleneck at its own rate.
row = dict(pm.OPTIONAL, replicas=2.0, num_ps=1.0, link_rate_bps=1e9, ps_link_rate_bps=1e8, gpus_per_node=1.0,
           payload_bytes_per_replica=1e6, aggregated_bytes_per_replica=1e6)
x = pm.row_terms(row, 1.0, 0.0)
check(close(x[0], 2e6 * 8 / 1e8, 1e-12) and x[1] == 2, "ps_link_rate_bps applies to the ps link")

# run_grid.py's results.json: finished runs on shaped links become rows (apply
# counts as compute); failed and unshaped runs are left out.
with tempfile.TemporaryDirectory() as tmp:
    run = {"name": "lenet_fp32_r2_ps1_1gbit", "net": "lenet", "codec": "fp32", "replicas": 2, "num_ps": 1,
           "rate": "1gbit", "rate_bps": 1e9, "ok": True, "step_ms": 114.0, "compute_ms": 28.0, "apply_ms": 1.0,
           "encode_ms": 0.9, "decode_ms": 0.4, "bytes_sent_per_replica": 5024448, "bytes_recv_per_replica": 5024448}
    grid = {"runs": [run, dict(run, name="x", ok=False), dict(run, name="y", rate="unshaped", rate_bps=None)],
            "date": "2026-11-24", "cpu": "test"}
    path = os.path.join(tmp, "results.json")
    json.dump(grid, open(path, "w"))
    rows = pm.read_rows(path)
    check(len(rows) == 1 and rows[0]["link_rate_bps"] == 1e9 and close(rows[0]["compute_time_s"], 0.029, 1e-12)
          and rows[0]["payload_bytes_per_replica"] == 5024448 and close(rows[0]["step_time_s"], 0.114, 1e-12),
          "results.json: one shaped, finished run read; apply counted as compute")
    del run["encode_ms"]
    json.dump({"runs": [run]}, open(path, "w"))
    try:
        pm.read_rows(path)
        check(False, "results.json run without encode_ms refused")
    except ValueError as e:
        check("encode_ms" in str(e) and "lenet_fp32_r2_ps1_1gbit" in str(e), "results.json run without encode_ms refused: %s" % e)

# The CLI end to end.
with tempfile.TemporaryDirectory() as tmp:
    synth = os.path.join(tmp, "synthetic.csv")
    run = lambda *a: subprocess.run([sys.executable, SCRIPT] + list(a), capture_output=True, text=True)
    r = run("synth", synth, "--efficiency", "0.75", "--overhead", "1e-4", "--noise", "0")
    check(r.returncode == 0 and open(synth).readline().startswith("# SYNTHETIC"), "synth writes a labelled CSV")
    r = run("fit", synth, "--out", os.path.join(tmp, "fit"))
    check(r.returncode == 0, "fit exits 0 (%s)" % r.stderr.strip()[-200:])
    doc = json.load(open(os.path.join(tmp, "fit", "fit.json")))
    check(doc["synthetic_input"] and close(doc["params"]["efficiency"], 0.75, 1e-6), "fit.json: synthetic, 0.75")
    check("SYNTHETIC" in open(os.path.join(tmp, "fit", "fit.md")).read(), "fit.md says SYNTHETIC")
    check(os.path.getsize(os.path.join(tmp, "fit", "fit.png")) > 1000, "fit.png written")
    # JSONL input works too.
    jl = os.path.join(tmp, "rows.jsonl")
    with open(synth) as f, open(jl, "w") as g:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            g.write(json.dumps(row) + "\n")
    r = run("fit", jl, "--out", os.path.join(tmp, "fitjl"))
    check(r.returncode == 0, "fit reads JSONL")
    # A missing column is named.
    bad = os.path.join(tmp, "bad.csv")
    with open(bad, "w") as f:
        f.write("net,codec,replicas\nx,fp32,2\n")
    r = run("fit", bad, "--out", os.path.join(tmp, "bad"))
    check(r.returncode == 2 and "lacks" in r.stderr and "num_ps" in r.stderr, "missing columns are named")
    r = run("paper", "--out", os.path.join(tmp, "paper"), "--from-fit", os.path.join(tmp, "fit", "fit.json"))
    check(r.returncode == 0 and "WARNING" in r.stdout, "paper from a synthetic fit warns")
    doc = json.load(open(os.path.join(tmp, "paper", "paper_model.json")))
    check(any(x["workers"] == 512 and x["net"] == "VGG-A" for x in doc["points"]), "paper points reach 512 GPUs")
    for png in ("images_per_s_vs_workers.png", "speedup_vs_workers.png", "speedup_vs_bandwidth.png",
                "terngrad_over_fp32_vs_workers.png"):
        check(os.path.getsize(os.path.join(tmp, "paper", png)) > 1000, png + " written")

print("%d failure(s)" % len(failures))
sys.exit(1 if failures else 0)
