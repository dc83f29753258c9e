#!/usr/bin/env bash
# Python.InstalledInFreshVenv: pip install <repo>/python into a new virtual
# environment (offline: --no-build-isolation, --no-index), then the codec and
# DDP hook tests with that environment's python, from outside the repository
# and with no TERNGRAD_LIBRARY or PYTHONPATH: they must find the libterngrad.so
# the install built and bundled. Exits 77 (ctest SKIP) when venv, pip or
# setuptools is missing.
#
# usage: installed_in_fresh_venv.sh <python3 with numpy (and torch)> <repository root>
set -euo pipefail
base_python=$1
repo=$2
unset TERNGRAD_LIBRARY PYTHONPATH

skip() {
  echo "SKIPPED: $*"
  exit 77
}
# --system-site-packages gives the environment the base interpreter's numpy
# and torch (Debian's python3-numpy, python3-torch), so nothing is downloaded.
"$base_python" -c "import venv, ensurepip" 2>/dev/null ||
  skip "$base_python has no venv/ensurepip (Debian: python3-venv)"
"$base_python" -m pip --version >/dev/null 2>&1 || skip "$base_python has no pip (Debian: python3-pip)"
"$base_python" -c "import setuptools, wheel" 2>/dev/null ||
  skip "$base_python has no setuptools or wheel (Debian: python3-setuptools, python3-wheel)"

work=$(mktemp -d "${TMPDIR:-/tmp}/terngrad-venv-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$base_python" -m venv --system-site-packages "$work/venv"
venv_python=$work/venv/bin/python

# The project's CMakeLists.txt uses ccache by itself when it is installed, so
# the library's build inside pip is cheap after any other build of the tree.
"$venv_python" -m pip install --no-build-isolation --no-index --no-cache-dir \
  --disable-pip-version-check "$repo/python"

cd "$work"
"$venv_python" - <<'PY'
import sys
import terngrad
path = terngrad.library_path()
if not path.startswith(sys.prefix):
    sys.exit("loaded %s, not the copy bundled in %s" % (path, sys.prefix))
print("terngrad %s from %s" % (terngrad.version(), path))
PY
export OMP_NUM_THREADS=1  # two DDP worker processes share the machine
"$venv_python" "$repo/tests/python/test_codec.py"
"$venv_python" "$repo/tests/python/test_ddp_hook.py"
