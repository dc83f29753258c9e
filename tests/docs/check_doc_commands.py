#!/usr/bin/env python3
"""The commands in the README and docs/ name real tools and real flags.

Extracts every command line from the shell code blocks of README.md and
docs/*.md (continuation lines joined, comments dropped, `&&` / `|` / `;`
split), finds each project tool it runs (tg-*, the bench programs) in the
build tree, and runs `TOOL --help` (`TOOL SUBCOMMAND --help` for tools with
subcommands). A flag the help does not name, a subcommand it refuses, a
tg-* tool that is not built or a benchmark that is no CMake target fails
the check, naming the doc and the line (a benchmark this configuration does
not build, e.g. a CUDA one, is only checked to exist).
Arguments after tg-cluster's `--` are tg-train's, and are checked against it.

    check_doc_commands.py REPO_ROOT BUILD_DIR
Exits 0 when every command checks out, 1 otherwise.
"""
import glob
import os
import re
import shlex
import subprocess
import sys

# Tools with subcommands: the first word after the tool that is not a flag.
SUBCOMMAND_TOOLS = {"tg-codec", "tg-experiment"}
# Tools that hand the words after a lone "--" to another tool.
PASS_THROUGH = {"tg-cluster": "tg-train"}


def code_blocks(path):
    """(line number, text) of each logical line in the file's sh/bash blocks."""
    lines = open(path, encoding="utf-8").read().split("\n")
    inside, lang, pending, start = False, "", "", 0
    for i, line in enumerate(lines, 1):
        fence = re.match(r"^\s*```(\w*)", line)
        if fence:
            inside, lang = (not inside), fence.group(1)
            pending = ""
            continue
        if not inside or lang not in ("sh", "bash", ""):
            continue
        if not pending:
            start = i
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield start, pending + line
        pending = ""


def segments(line):
    """The simple commands of a shell line, as token lists."""
    line = re.sub(r"(^|\s)#.*$", "", line)  # a comment
    for part in re.split(r"&&|\|\||\||;", line):
        try:
            tokens = shlex.split(part)
        except ValueError:  # an unbalanced quote: not a command line
            continue
        while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):  # VAR=value prefixes
            tokens = tokens[1:]
        if tokens:
            yield tokens


def find_tool(build, name):
    for sub in ("experiments", "quantize/tools", "bench", "train/tools", "comm/tools"):
        path = os.path.join(build, sub, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    hits = [p for p in glob.glob(os.path.join(build, "**", name), recursive=True)
            if os.path.isfile(p) and os.access(p, os.X_OK)]
    return hits[0] if hits else None


_targets = None


def defined_target(root, name):
    """True if a CMakeLists.txt under root defines executable `name`."""
    global _targets
    if _targets is None:
        _targets = set()
        for cm in glob.glob(os.path.join(root, "**", "CMakeLists.txt"), recursive=True):
            if "/build" in cm[len(root):]:
                continue
            text = open(cm, encoding="utf-8", errors="replace").read()
            _targets.update(re.findall(r"add_executable\(\s*([A-Za-z0-9_.+-]+)", text))
    return name in _targets


def project_tool(word, build):
    name = os.path.basename(word)
    if name.startswith("tg-") or re.match(r"^[a-z0-9_]+_bench$", name) or name == "gradient_packing":
        return name
    return None


_help_cache = {}


def help_text(path, sub):
    key = (path, sub)
    if key not in _help_cache:
        cmd = [path] + ([sub] if sub else []) + ["--help"]
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
            _help_cache[key] = (r.returncode, r.stdout.decode(errors="replace"))
        except subprocess.TimeoutExpired:
            _help_cache[key] = (124, "did not answer --help within 30 s (it ran instead?)")
    return _help_cache[key]


def names_flag(text, flag):
    return re.search(re.escape(flag) + r"(?![A-Za-z0-9_-])", text) is not None


def check(root, build):
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    problems, checked = [], 0
    for doc in docs:
        rel = os.path.relpath(doc, root)
        for lineno, line in code_blocks(doc):
            for tokens in segments(line):
                tool = project_tool(tokens[0], build)
                if tool is None:
                    continue
                groups = [(tool, tokens[1:])]
                if tool in PASS_THROUGH and "--" in tokens:
                    k = tokens.index("--")
                    groups = [(tool, tokens[1:k]), (PASS_THROUGH[tool], tokens[k + 1:])]
                for name, args in groups:
                    path = find_tool(build, name)
                    where = "%s:%d: %s" % (rel, lineno, name)
                    if path is None:
                        # Every build makes the tg-* tools; a benchmark this
                        # configuration does not build (CUDA, an optional
                        # dependency) must still be a target.
                        if name.startswith("tg-"):
                            problems.append("%s: not built in %s" % (where, build))
                        elif not defined_target(root, name):
                            problems.append("%s: no such tool (not built in %s, and no CMake target)" % (where, build))
                        continue
                    sub = None
                    if name in SUBCOMMAND_TOOLS and args and not args[0].startswith("-"):
                        sub = args[0]
                    if sub is None and not any(a.startswith("--") and a not in ("--", "--help") for a in args):
                        continue  # nothing to check beyond the tool being built
                    rc, text = help_text(path, sub)
                    if rc != 0:
                        problems.append("%s%s --help exits %d: %s" % (where, " " + sub if sub else "", rc,
                                                                       text.strip().splitlines()[-1:] or ""))
                        continue
                    for a in args:
                        if not a.startswith("--") or a in ("--", "--help"):
                            continue
                        flag = a.split("=", 1)[0]
                        checked += 1
                        if not names_flag(text, flag):
                            problems.append("%s%s: %s is not in its --help" % (where, " " + sub if sub else "", flag))
    return problems, checked


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().split("\n\n")[-2], file=sys.stderr)
        return 2
    root, build = sys.argv[1], sys.argv[2]
    problems, checked = check(root, build)
    for p in problems:
        print("FAIL " + p)
    print("%d flags checked in the README and docs/; %d problems" % (checked, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
