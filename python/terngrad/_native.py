"""Loading libterngrad.so and declaring the C API (terngrad.h) to ctypes.

Where the library is looked for, in order:
  1. the path in the environment variable TERNGRAD_LIBRARY (build trees, tests);
  2. libterngrad.so next to this file: `pip install ./python` builds the
     library with CMake and bundles it there (python/terngrad_setup.py);
  3. the libdir of an installed tree: `cmake --install` puts this package in
     <libdir>/python3/dist-packages/terngrad, three levels below the library;
  4. the dynamic loader's search path (LD_LIBRARY_PATH, ldconfig) by soname.
"""
import ctypes
import os
from pathlib import Path

# The C API this package is written against: TG_API_VERSION_MAJOR/MINOR of
# terngrad.h, and the soname the library has for it.
API_MAJOR, API_MINOR = 0, 1
SONAME = "libterngrad.so.%d.%d" % (API_MAJOR, API_MINOR)
# The copy a pip install bundles: unversioned, the C API version is checked
# after loading.
BUNDLED_NAME = "libterngrad.so"

_c_tg_status = ctypes.c_int
_codec_p = ctypes.c_void_p
_f32_p = ctypes.c_void_p  # raw addresses: the data pointers of arrays and tensors
_u8_p = ctypes.c_void_p


class TernGradError(RuntimeError):
    """A libterngrad call failed. `status` is the tg_status number,
    `status_name` its name (e.g. "TG_ERR_NON_FINITE"), and the message the
    library's, naming the problem."""

    def __init__(self, status, status_name, message):
        super().__init__("%s: %s" % (status_name, message))
        self.status = status
        self.status_name = status_name


def _candidates():
    env = os.environ.get("TERNGRAD_LIBRARY")
    if env:
        return [env]  # an explicit choice: no silent fallback to another copy
    here = Path(__file__).resolve()
    bundled = here.with_name(BUNDLED_NAME)
    installed = here.parents[3] / SONAME
    return [str(bundled), str(installed), SONAME]


def _load():
    tried = []
    for path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "terngrad: cannot load libterngrad; tried " + "; ".join(tried) +
        ". Install the package with pip install ./python (it builds and bundles the library), "
        "or build it (cmake --build build --target terngrad_capi) and set "
        "TERNGRAD_LIBRARY=<build>/comm/capi/%s, or install it with cmake --install." % SONAME)


def _declare(lib):
    def fn(name, restype, *argtypes):
        f = getattr(lib, name)
        f.restype = restype
        f.argtypes = list(argtypes)

    u32, u64, size = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_size_t
    fn("tg_version", ctypes.c_char_p)
    fn("tg_api_version", u32)
    fn("tg_last_error_message", ctypes.c_char_p)
    fn("tg_status_name", ctypes.c_char_p, ctypes.c_int)
    fn("tg_cuda_built", ctypes.c_int)
    fn("tg_cuda_available", ctypes.c_int)
    fn("tg_codec_create", _c_tg_status, ctypes.c_char_p, ctypes.POINTER(_codec_p))
    fn("tg_codec_destroy", None, _codec_p)
    fn("tg_codec_spec", _c_tg_status, _codec_p, ctypes.c_char_p, size, ctypes.POINTER(size))
    fn("tg_codec_payload_bytes", _c_tg_status, _codec_p, u64, ctypes.POINTER(size))
    fn("tg_codec_variable_size", _c_tg_status, _codec_p, ctypes.POINTER(ctypes.c_int))
    fn("tg_codec_wants_shared_scale", _c_tg_status, _codec_p, ctypes.POINTER(ctypes.c_int))
    fn("tg_codec_local_scale", _c_tg_status, _codec_p, _f32_p, u64, ctypes.POINTER(ctypes.c_float))
    fn("tg_codec_encode", _c_tg_status, _codec_p, _f32_p, u64, u32, u32, u64,
       ctypes.POINTER(ctypes.c_float), _u8_p, size, ctypes.POINTER(size))
    vp, dtype = ctypes.c_void_p, ctypes.c_int
    fn("tg_codec_local_scale_typed", _c_tg_status, _codec_p, vp, u64, dtype, ctypes.POINTER(ctypes.c_float))
    fn("tg_codec_encode_typed", _c_tg_status, _codec_p, vp, u64, dtype, u32, u32, u64,
       ctypes.POINTER(ctypes.c_float), _u8_p, size, ctypes.POINTER(size))
    fn("tg_codec_encode_slices_typed", _c_tg_status, _codec_p, vp, u64, dtype, size, ctypes.POINTER(u64),
       ctypes.POINTER(u64), u32, u32, u64, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(_u8_p),
       ctypes.POINTER(size), ctypes.POINTER(size))
    fn("tg_codec_decode", _c_tg_status, _codec_p, _u8_p, size, _f32_p, u64)
    fn("tg_codec_decode_accumulate", _c_tg_status, _codec_p, _u8_p, size, _f32_p, u64)
    fn("tg_codec_save_state", _c_tg_status, _codec_p, _u8_p, size, ctypes.POINTER(size))
    fn("tg_codec_load_state", _c_tg_status, _codec_p, _u8_p, size)
    fn("tg_codec_encode_slices", _c_tg_status, _codec_p, _f32_p, u64, size, ctypes.POINTER(u64),
       ctypes.POINTER(u64), u32, u32, u64, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(_u8_p),
       ctypes.POINTER(size), ctypes.POINTER(size))
    fn("tg_codec_aggregate", _c_tg_status, _codec_p, ctypes.POINTER(_u8_p), ctypes.POINTER(size), size, u64,
       _u8_p, size, ctypes.POINTER(size))
    fn("tg_codec_aggregate_bytes", _c_tg_status, _codec_p, u64, size, ctypes.POINTER(size))
    fn("tg_codec_decode_aggregate", _c_tg_status, _codec_p, _u8_p, size, _f32_p, u64)
    fn("tg_auto_candidates", _c_tg_status, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, size, ctypes.POINTER(size))
    dbl = ctypes.c_double
    fn("tg_auto_choose", _c_tg_status, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(u64), ctypes.POINTER(ctypes.c_int),
       size, dbl, dbl, dbl, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(dbl))
    # Device pointers (CUDA builds; elsewhere they return TG_ERR_UNSUPPORTED).
    stream = ctypes.c_void_p
    fn("tg_codec_local_scale_device_typed", _c_tg_status, _codec_p, ctypes.c_void_p, u64, ctypes.c_int, stream,
       ctypes.POINTER(ctypes.c_float))
    fn("tg_codec_encode_device_typed", _c_tg_status, _codec_p, ctypes.c_void_p, u64, ctypes.c_int, u32, u32, u64,
       ctypes.POINTER(ctypes.c_float), _u8_p, size, stream, ctypes.POINTER(size))
    fn("tg_codec_device_takes", _c_tg_status, _codec_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int))
    fn("tg_codec_local_scale_device", _c_tg_status, _codec_p, _f32_p, u64, stream, ctypes.POINTER(ctypes.c_float))
    fn("tg_codec_encode_device", _c_tg_status, _codec_p, _f32_p, u64, u32, u32, u64,
       ctypes.POINTER(ctypes.c_float), _u8_p, size, stream, ctypes.POINTER(size))
    fn("tg_codec_decode_device", _c_tg_status, _codec_p, _u8_p, size, _f32_p, u64, stream)
    fn("tg_codec_decode_accumulate_device", _c_tg_status, _codec_p, _u8_p, size, _f32_p, u64, stream)
    fn("tg_codec_device_check", _c_tg_status, _codec_p, stream)
    fn("tg_codec_encode_slices_device_typed", _c_tg_status, _codec_p, vp, u64, dtype, size, ctypes.POINTER(u64),
       ctypes.POINTER(u64), u32, u32, u64, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(vp), ctypes.POINTER(size),
       stream, ctypes.POINTER(size))
    fn("tg_codec_aggregate_device", _c_tg_status, _codec_p, ctypes.POINTER(vp), ctypes.POINTER(size), size, u64, vp,
       size, stream, ctypes.POINTER(size))
    fn("tg_codec_decode_aggregate_device", _c_tg_status, _codec_p, vp, size, vp, u64, stream)


lib, _path = _load()
_declare(lib)

_loaded = lib.tg_api_version()
if (_loaded // 10000, _loaded // 100 % 100) != (API_MAJOR, API_MINOR):
    raise ImportError("terngrad: %s has C API %d.%d.%d, this package needs %d.%d" %
                      (_path, _loaded // 10000, _loaded // 100 % 100, _loaded % 100,
                       API_MAJOR, API_MINOR))


def check(status):
    """Raises TernGradError for a failed call's status."""
    if status != 0:
        raise TernGradError(status, lib.tg_status_name(status).decode(),
                            lib.tg_last_error_message().decode(errors="replace"))


def library_path():
    """The path libterngrad was loaded from."""
    return _path


def version():
    """libterngrad's version string, e.g. "0.1.0"."""
    return lib.tg_version().decode()


def cuda_available():
    """True if libterngrad was built with CUDA and a device is present."""
    return bool(lib.tg_cuda_available())
