# pip install ./python: builds libterngrad with CMake and bundles it in the
# package (see terngrad_setup.py).
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from terngrad_setup import setup_terngrad  # noqa: E402

setup_terngrad(package_source_dir=".")
