"""terngrad: TernGrad gradient compression (2 bits per element) for Python.

A ctypes binding of libterngrad.so (the C API, terngrad.h): codecs on NumPy
arrays and PyTorch tensors (CPU, and CUDA where libterngrad has CUDA) without
copies, and (in terngrad.torch) DistributedDataParallel communication hooks.

    import numpy as np, terngrad
    codec = terngrad.Codec("terngrad")          # clip 2.5, scale sharing
    payload = codec.encode(grad, seed=rank, step=step, tensor_id=0)
    total = np.zeros_like(grad)
    codec.decode_accumulate(payload, total)

See comm/capi/README.md for every route (C, CMake, pkg-config, Python, DDP).
"""
from ._native import TernGradError, cuda_available, library_path, version
from .choice import auto_candidates, choose_codecs
from .codec import Codec

__all__ = ["Codec", "TernGradError", "auto_candidates", "choose_codecs", "cuda_available", "library_path", "version"]
