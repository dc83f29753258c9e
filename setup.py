# pip install . from the repository root: the same package as
# pip install ./python (see python/terngrad_setup.py).
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "python"))
from terngrad_setup import setup_terngrad  # noqa: E402

setup_terngrad(package_source_dir="python")
