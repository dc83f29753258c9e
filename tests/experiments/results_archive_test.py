#!/usr/bin/env python3
"""experiments/results_archive.py: pack/unpack round trip, determinism,
checkpoints left out, hostile archives refused before anything is written,
and every result set in the tree readable with no raw runs/ left beside it."""
import io
import os
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(ROOT, "experiments", "results_archive.py")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL", what)


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=60)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


with tempfile.TemporaryDirectory() as tmp:
    s = os.path.join(tmp, "set")
    runs = {"runs/a/seed1/metrics.jsonl": '{"event":"train","step":1}\n',
            "runs/a/seed1/logs/ps-0.log": "ps up\n",
            "runs/b/result.json": "{}\n"}
    for rel, text in runs.items():
        write(os.path.join(s, rel), text)
    write(os.path.join(s, "runs/a/seed1/ckpt-30.tgck"), "weights")
    write(os.path.join(s, "runs/a/seed1/checkpoint"), "ckpt-30")
    write(os.path.join(s, "runs/a/seed1/model.safetensors"), "weights")
    r = run("pack", s)
    check(r.returncode == 0, f"pack: {r.stderr}")
    archive = os.path.join(s, "runs.tar.xz")
    check(not os.path.exists(os.path.join(s, "runs")), "pack removes runs/ once the archive is verified")
    first = open(archive, "rb").read()
    listed = run("list", s).stdout
    check(all(rel in listed for rel in runs), f"list shows every run file: {listed}")
    check("tgck" not in listed and "safetensors" not in listed and "/checkpoint" not in listed,
          f"checkpoints and weights are not archived: {listed}")
    r = run("unpack", s)
    check(r.returncode == 0, f"unpack: {r.stderr}")
    for rel, text in runs.items():
        p = os.path.join(s, rel)
        check(os.path.isfile(p) and open(p).read() == text, f"unpack restores {rel}")
    os.utime(os.path.join(s, "runs/b/result.json"), (1, 1))  # times must not matter
    check(run("pack", s).returncode == 0, "re-pack")
    check(open(archive, "rb").read() == first, "packing the same runs gives the same bytes")

    # A hostile archive: a member escaping runs/. Nothing is written.
    bad = os.path.join(tmp, "bad")
    os.makedirs(bad)
    with tarfile.open(os.path.join(bad, "runs.tar.xz"), "w:xz") as tar:
        for name in ("runs/ok.txt", "runs/../../escaped.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"x\n"))
    r = run("unpack", bad)
    check(r.returncode == 1 and "would land outside runs/" in r.stderr, f"hostile member refused: {r.stderr}")
    check(not os.path.exists(os.path.join(bad, "runs")) and not os.path.exists(os.path.join(tmp, "escaped.txt")),
          "a refused archive writes nothing")
    r = run("unpack", os.path.join(tmp, "nowhere"))
    check(r.returncode == 1 and "no such archive" in r.stderr, f"a missing archive is named: {r.stderr}")
    r = run("pack", os.path.join(tmp, "nowhere"))
    check(r.returncode == 1 and "no run directories" in r.stderr, f"nothing to pack is named: {r.stderr}")

# The tree: every set's archive reads; raw runs are not committed beside it.
results = os.path.join(ROOT, "experiments", "results")
archives = 0
for root, dirs, files in os.walk(results):
    if "runs.tar.xz" in files:
        archives += 1
        r = run("list", root)
        check(r.returncode == 0 and r.stdout.strip(), f"{root}/runs.tar.xz lists: {r.stderr}")
check(archives >= 4, f"the result sets' archives are in the tree (found {archives})")
try:
    tracked = subprocess.run(["git", "-C", ROOT, "ls-files", "experiments/results"], capture_output=True,
                             text=True, timeout=60)
    if tracked.returncode == 0:
        raw = [f for f in tracked.stdout.split() if "/runs/" in f]
        check(not raw, f"no raw run files are committed: {raw[:5]}")
except FileNotFoundError:
    print("git not found: the tracked-files check is skipped")

print("results_archive: %s" % ("FAILED" if failures else "ok"))
sys.exit(1 if failures else 0)
