"""setuptools for the terngrad package, shared by python/setup.py (`pip install
./python`) and the repository root's setup.py (`pip install .`).

terngrad is a ctypes binding, so the only compiled part is libterngrad.so, the
C API (comm/capi). build_py builds it with CMake from this checkout in a
temporary directory and copies it into the package, where terngrad/_native.py
looks first (after $TERNGRAD_LIBRARY). Nothing is downloaded: with
`pip install --no-build-isolation` Debian's python3-setuptools is enough.

Environment variables the build reads:
  CMAKE                        the cmake program (default: cmake on PATH)
  TERNGRAD_CMAKE_ARGS          extra configure arguments, e.g. "-DTG_CUDA=ON"
  CMAKE_BUILD_PARALLEL_LEVEL   build jobs (default: the CPU count)
  CMAKE_CXX_COMPILER_LAUNCHER  read by CMake itself; the project also picks up
                               ccache on its own when it is installed
"""
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.errors import ExecError, SetupError

PYTHON_DIR = Path(__file__).resolve().parent
REPO_ROOT = PYTHON_DIR.parent
# The name _native.py looks for next to itself. Not the soname: the C API
# version is checked after loading, so the bundled name need not carry it.
BUNDLED_LIBRARY = "libterngrad.so"


def _project_version():
    """The version in the top-level CMakeLists.txt's project(), so the Python
    package and libterngrad have one version."""
    cmakelists = REPO_ROOT / "CMakeLists.txt"
    match = re.search(r"project\(\s*terngrad\s+VERSION\s+([0-9.]+)",
                      cmakelists.read_text()) if cmakelists.exists() else None
    if not match:
        raise SetupError(
            "terngrad: %s with project(terngrad VERSION ...) not found: the Python package "
            "builds libterngrad from the C++ sources, so install it from a checkout of the "
            "terngrad repository (pip install <checkout>/python)" % cmakelists)
    return match.group(1)


def _run(command, what):
    print("terngrad: " + shlex.join(command), flush=True)
    try:
        subprocess.run(command, check=True)
    except subprocess.CalledProcessError as e:
        raise ExecError("terngrad: %s failed (exit status %d): see CMake's messages above "
                        "(pip install -v shows them all)" % (what, e.returncode)) from None


def build_libterngrad(destination_dir):
    """Configures the repository with only the C API (TG_LIBRARY_ONLY), builds
    the terngrad_capi target in a temporary directory and copies the library
    to destination_dir/libterngrad.so."""
    cmake = shutil.which(os.environ.get("CMAKE", "cmake"))
    if not cmake:
        raise SetupError(
            "terngrad: cmake not found (looked for %r on PATH): libterngrad is C++ built with "
            "CMake >= 3.25. Install it (Debian: apt-get install cmake g++ libhwy-dev, or "
            "scripts/install_deps.sh) or set CMAKE=/path/to/cmake" % os.environ.get("CMAKE", "cmake"))
    if not (REPO_ROOT / "comm" / "capi" / "CMakeLists.txt").exists():
        raise SetupError("terngrad: the C API sources (%s) are missing: install from a checkout of "
                         "the terngrad repository" % (REPO_ROOT / "comm" / "capi"))

    with tempfile.TemporaryDirectory(prefix="terngrad-cmake-") as build_dir:
        library_dir = Path(build_dir) / "lib"
        # CUDA off and no -march=native: a library that loads on any x86-64
        # (the codec picks its SIMD kernels at run time). TERNGRAD_CMAKE_ARGS
        # come last, so they override these.
        configure = [cmake, "-S", str(REPO_ROOT), "-B", build_dir,
                     "-DTG_LIBRARY_ONLY=ON", "-DTG_CUDA=OFF", "-DTG_NATIVE=OFF",
                     "-DCMAKE_BUILD_TYPE=Release",
                     "-DCMAKE_LIBRARY_OUTPUT_DIRECTORY=" + str(library_dir)]
        try:
            configure += shlex.split(os.environ.get("TERNGRAD_CMAKE_ARGS", ""))
        except ValueError as e:
            raise SetupError("terngrad: TERNGRAD_CMAKE_ARGS=%r is not a valid shell word list: %s"
                             % (os.environ["TERNGRAD_CMAKE_ARGS"], e)) from None
        _run(configure, "configuring libterngrad (cmake -S %s)" % REPO_ROOT)

        build = [cmake, "--build", build_dir, "--target", "terngrad_capi"]
        if not os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL"):
            # A bare --parallel lets make start unboundedly many compilers.
            build += ["--parallel", str(os.cpu_count() or 1)]
        _run(build, "building libterngrad (cmake --build --target terngrad_capi)")

        built = library_dir / BUNDLED_LIBRARY  # the namelink: copy2 copies what it points to
        if not built.exists():
            raise ExecError("terngrad: the build finished but %s is missing" % built)
        destination_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, destination_dir / BUNDLED_LIBRARY)
        print("terngrad: bundled %s in %s" % (built.resolve().name, destination_dir), flush=True)


class BuildPyWithLibterngrad(build_py):
    """build_py, then libterngrad.so into the built package."""

    def run(self):
        super().run()
        if self.editable_mode:
            # pip install -e: the package is imported from the source tree, so
            # the library goes there (like build_ext --inplace).
            package_dir = Path(self.get_package_dir("terngrad")).resolve()
        else:
            package_dir = Path(self.build_lib) / "terngrad"
        build_libterngrad(package_dir)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [
            str(Path(self.build_lib) / "terngrad" / BUNDLED_LIBRARY)]


class PlatformDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform (and install
    it into platlib), not as pure Python."""

    def has_ext_modules(self):
        return True


def setup_terngrad(package_source_dir):
    """setup() for the terngrad package found in package_source_dir/terngrad
    (a path relative to the calling setup.py)."""
    setup(
        name="terngrad",
        version=_project_version(),
        description="TernGrad gradient compression (2 bits per element) for NumPy and "
                    "PyTorch DDP, over libterngrad",
        python_requires=">=3.8",
        install_requires=["numpy"],
        extras_require={"torch": ["torch"]},
        packages=["terngrad"],
        package_dir={"terngrad": str(Path(package_source_dir) / "terngrad")},
        cmdclass={"build_py": BuildPyWithLibterngrad},
        distclass=PlatformDistribution,
        zip_safe=False,  # ctypes loads the library from a real file
        # setuptools' scratch space under python/, away from a CMake build/ at
        # the repository root.
        options={"build": {"build_base": str(PYTHON_DIR / "build")},
                 "egg_info": {"egg_base": str(PYTHON_DIR)}},
    )
