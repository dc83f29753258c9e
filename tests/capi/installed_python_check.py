"""Run by consumer_run.cmake with only PYTHONPATH pointing into an installed
prefix: the installed package must find the installed libterngrad by itself
and encode FORMAT.md's worked example byte-exactly."""
import os

import numpy as np

import terngrad

assert "TERNGRAD_LIBRARY" not in os.environ
lib = os.path.realpath(terngrad.library_path())
pkg = os.path.realpath(os.path.dirname(terngrad.__file__))
assert os.path.dirname(lib) == os.path.dirname(os.path.dirname(os.path.dirname(pkg))), (lib, pkg)
codec = terngrad.Codec("terngrad:clip=0")
payload = codec.encode(np.array([0.5, -1, 0.25, 0, -0.125, 2], np.float32), seed=50, step=7, tensor_id=3)
assert bytes(payload[40:]) == b"\x19\x04", bytes(payload[40:])  # the version-2 example
print("python: installed package", pkg, "loaded", lib)
