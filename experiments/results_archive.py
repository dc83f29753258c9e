#!/usr/bin/env python3
"""Keeps a result set's raw run directories as one compressed archive.

A result set under experiments/results/<set>/ keeps in the tree what people
read and what reproduces it: README.md (the commands, machine and date),
the tables (results.md / .csv / .json), the plots (PNG) and the configs.
The raw run directories behind the tables (per-step metrics.jsonl,
eval.jsonl, task logs, link counters, each run's run.json / result.json /
config.pbtxt) are kept, compressed, in <set>/runs.tar.xz: tens of thousands
of log lines stay out of the source tree's navigation, yet every table can
still be checked or re-plotted from them. Checkpoints and weights are never
kept.

  results_archive.py pack RESULT_SET      runs/ -> runs.tar.xz (runs/ removed)
  results_archive.py unpack RESULT_SET    runs.tar.xz -> runs/ (to re-plot)
  results_archive.py list RESULT_SET      the archive's files

The archive is deterministic (sorted names, zero times and owners), so
packing unchanged runs changes nothing in git. It is written atomically.
Unpacking refuses members that are not plain files or would land outside
runs/.
"""
import argparse
import io
import os
import shutil
import sys
import tarfile
import tempfile

ARCHIVE = "runs.tar.xz"
RUNS = "runs"
# Checkpoints, weights and temporaries: large, and remade by re-running.
NEVER_KEPT_SUFFIXES = (".tgck", ".safetensors", ".tmp")
NEVER_KEPT_NAMES = ("checkpoint",)


class ArchiveError(Exception):
    pass


def kept(relpath):
    name = os.path.basename(relpath)
    return not (name.endswith(NEVER_KEPT_SUFFIXES) or name in NEVER_KEPT_NAMES or name.startswith("tmp"))


def run_files(runs_dir):
    """Every kept regular file below runs_dir, as sorted paths relative to its parent."""
    files = []
    for root, dirs, names in os.walk(runs_dir):
        dirs.sort()
        for n in sorted(names):
            full = os.path.join(root, n)
            rel = os.path.relpath(full, os.path.dirname(runs_dir))
            if os.path.islink(full) or not os.path.isfile(full):
                raise ArchiveError(f"{full}: not a plain file (links and devices are not archived)")
            if kept(rel):
                files.append(rel)
    return files


def pack(result_set):
    runs_dir = os.path.join(result_set, RUNS)
    if not os.path.isdir(runs_dir):
        raise ArchiveError(f"{runs_dir}: no run directories to pack")
    files = run_files(runs_dir)
    if not files:
        raise ArchiveError(f"{runs_dir}: holds no files worth keeping")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            info = tarfile.TarInfo(rel)
            with open(os.path.join(result_set, rel), "rb") as f:
                data = f.read()
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    target = os.path.join(result_set, ARCHIVE)
    fd, tmp = tempfile.mkstemp(dir=result_set, prefix=".runs.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    # The archive is verified before the directory it replaces goes.
    if sorted(m.name for m in members(target)) != sorted(files):
        raise ArchiveError(f"{target}: does not list what was packed; {runs_dir} left in place")
    shutil.rmtree(runs_dir)
    print(f"{target}: {len(files)} files, {os.path.getsize(target)} bytes")


def members(archive):
    if not os.path.isfile(archive):
        raise ArchiveError(f"{archive}: no such archive")
    try:
        with tarfile.open(archive, mode="r:xz") as tar:
            ms = tar.getmembers()
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ArchiveError(f"{archive}: not a readable .tar.xz ({e})")
    for m in ms:
        parts = m.name.split("/")
        if not m.isfile():
            raise ArchiveError(f"{archive}: member {m.name!r} is not a plain file")
        if m.name.startswith("/") or ".." in parts or parts[0] != RUNS or len(parts) < 2:
            raise ArchiveError(f"{archive}: member {m.name!r} would land outside {RUNS}/")
    return ms


def unpack(result_set):
    archive = os.path.join(result_set, ARCHIVE)
    ms = members(archive)  # every member checked before anything is written
    with tarfile.open(archive, mode="r:xz") as tar:
        for m in ms:
            dest = os.path.join(result_set, m.name)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with tar.extractfile(m) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
    print(f"{os.path.join(result_set, RUNS)}: {len(ms)} files from {archive}")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["pack", "unpack", "list"])
    ap.add_argument("result_set", nargs="+", help="a directory under experiments/results")
    a = ap.parse_args(argv)
    try:
        for d in a.result_set:
            if a.command == "pack":
                pack(d)
            elif a.command == "unpack":
                unpack(d)
            else:
                for m in members(os.path.join(d, ARCHIVE)):
                    print(f"{m.size:10d}  {m.name}")
    except ArchiveError as e:
        print(f"results_archive: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
