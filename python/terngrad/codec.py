"""The gradient codec on NumPy arrays and PyTorch tensors, zero-copy.

Gradients must be float32 and contiguous (the encoders, local_scale and
encode_slices also take float16 and bfloat16 CPU gradients, and float16
arrays: the bytes of their float32 values, read without a float32 copy by
terngrad and ef()/server_ef() of it); payloads are uint8 (NumPy arrays,
torch tensors, bytes, bytearray). Nothing is converted or copied behind the
caller's back: a float64 array or a strided view is refused with an error that
says what to pass instead.

CUDA tensors (libterngrad built with CUDA): local_scale, encode, decode and
decode_accumulate run on the device, on PyTorch's current stream of the
tensor's device, and give the same bytes and values as on the CPU. Their
payloads and outputs are CUDA tensors on the same device. They wait for the
stream before returning (to report a non-finite input or a malformed
payload), except with check=False: then the next device_check() reports
what the device found. The slice, aggregate and state functions take CPU
tensors and arrays only.
"""
import ctypes

from . import _native
from ._native import check, lib


def _is_tensor(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


def _is_ndarray(x):
    return type(x).__module__ == "numpy" and hasattr(x, "__array_interface__")


def _describe(x):
    if _is_tensor(x):
        return "torch.Tensor(dtype=%s, device=%s)" % (x.dtype, x.device)
    if _is_ndarray(x):
        return "numpy.ndarray(dtype=%s)" % x.dtype
    return type(x).__name__


# NumPy's dtype.str for the two element types (little-endian float32, bytes).
_NUMPY_CODES = {"float32": "<f4", "uint8": "|u1"}


def _is_cuda(x):
    return _is_tensor(x) and x.device.type == "cuda"


def _tensor_view(x, name, dtype):
    """(address, element count) of a contiguous tensor of dtype."""
    if str(x.dtype) != "torch." + dtype:
        raise TypeError("%s must be %s, got %s (use .to(torch.%s))" % (name, dtype, x.dtype, dtype))
    if not x.is_contiguous():
        raise ValueError("%s is not contiguous (use .contiguous())" % name)
    return x.data_ptr(), x.numel()


def _cuda_view(x, name, dtype, device):
    """(address, element count) of a contiguous CUDA tensor of dtype on
    device (the gradient's)."""
    if not _is_cuda(x):
        raise TypeError("%s must be a torch.Tensor on %s (the gradient's device), got %s" %
                        (name, device, _describe(x)))
    if x.device != device:
        raise ValueError("%s is on %s, the gradient on %s" % (name, x.device, device))
    return _tensor_view(x, name, dtype)


def _stream_of(device):
    """PyTorch's current CUDA stream on device, as the C API's void*."""
    import torch
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def _array_view(x, name, dtype, writable):
    """(address, element count) of a contiguous CPU tensor or NumPy array of
    dtype ("float32" or "uint8"); None if x is neither kind."""
    if _is_tensor(x):
        if x.device.type != "cpu":
            raise ValueError("%s is on %s; this function takes CPU tensors (local_scale, encode, decode and "
                             "decode_accumulate also take CUDA tensors)" % (name, x.device))
        return _tensor_view(x, name, dtype)
    if _is_ndarray(x):
        if x.dtype.str != _NUMPY_CODES[dtype]:
            raise TypeError("%s must be %s, got %s (use .astype(numpy.%s))" % (name, dtype, x.dtype, dtype))
        if not x.flags.c_contiguous:
            raise ValueError("%s is not C-contiguous (use numpy.ascontiguousarray)" % name)
        if writable and not x.flags.writeable:
            raise ValueError("%s is read-only" % name)
        return x.ctypes.data, x.size
    return None


def _float_view(x, name, writable):
    """(address, element count) of a float32 contiguous CPU array or tensor."""
    view = _array_view(x, name, "float32", writable)
    if view is None:
        raise TypeError("%s must be a numpy.ndarray or torch.Tensor of float32, got %s" %
                        (name, _describe(x)))
    return view


# The gradient element types the encoders read (the C API's tg_dtype): a
# float16 or bfloat16 gradient gives the bytes of its float32 values, read
# without a float32 copy by terngrad and ef()/server_ef() of it.
_GRAD_DTYPES = {"float32": 0, "float16": 1, "bfloat16": 2}
_NUMPY_GRAD_CODES = {"<f4": 0, "<f2": 1}


def _grad_view(x, name):
    """(address, element count, tg_dtype) of a contiguous CPU gradient:
    a tensor of float32, float16 or bfloat16, or a NumPy array of float32
    or float16."""
    if _is_tensor(x):
        kind = str(x.dtype).replace("torch.", "")
        if kind not in _GRAD_DTYPES:
            raise TypeError("%s must be float32, float16 or bfloat16, got %s" % (name, x.dtype))
        ptr, n = _array_view(x, name, kind, writable=False)  # a CPU tensor (refuses others by name)
        return ptr, n, _GRAD_DTYPES[kind]
    if _is_ndarray(x):
        if x.dtype.str not in _NUMPY_GRAD_CODES:
            raise TypeError("%s must be float32 or float16, got %s (use .astype(numpy.float32))" % (name, x.dtype))
        if not x.flags.c_contiguous:
            raise ValueError("%s is not C-contiguous (use numpy.ascontiguousarray)" % name)
        return x.ctypes.data, x.size, _NUMPY_GRAD_CODES[x.dtype.str]
    raise TypeError("%s must be a numpy.ndarray or torch.Tensor of float32, float16 or bfloat16, got %s" %
                    (name, _describe(x)))


def _cuda_grad_view(grad):
    """(address, element count, tg_dtype) of a contiguous CUDA gradient of
    float32, float16 or bfloat16."""
    kind = str(grad.dtype).replace("torch.", "")
    if kind not in _GRAD_DTYPES:
        raise TypeError("grad must be float32, float16 or bfloat16, got %s" % grad.dtype)
    ptr, n = _cuda_view(grad, "grad", kind, grad.device)
    return ptr, n, _GRAD_DTYPES[kind]


def _byte_view(p, name, writable):
    """(address, byte count, keepalive) of a uint8 buffer."""
    view = _array_view(p, name, "uint8", writable)
    if view is not None:
        return view + (p,)
    if isinstance(p, bytes):
        if writable:
            raise ValueError("%s is bytes, which is read-only (pass a bytearray or a uint8 array)" % name)
        return ctypes.cast(ctypes.c_char_p(p), ctypes.c_void_p).value, len(p), p
    if isinstance(p, (bytearray, memoryview)):
        view = memoryview(p).cast("B")
        if not view.c_contiguous:
            raise ValueError("%s is not contiguous" % name)
        if view.readonly:
            if writable:
                raise ValueError("%s is read-only" % name)
            return _byte_view(bytes(view), name, writable)  # a read-only view: copy to pin it
        if len(view) == 0:
            return 0, 0, view
        buf = (ctypes.c_uint8 * len(view)).from_buffer(view)
        return ctypes.addressof(buf), len(view), (view, buf)
    raise TypeError("%s must be a uint8 numpy.ndarray or torch.Tensor, bytes or bytearray, got %s" %
                    (name, _describe(p)))


class Codec:
    """A gradient codec from a spec: "terngrad" (clip=2.5, scale sharing on),
    "terngrad:clip=0", "terngrad:clip=2.5,share_scale=0", "fp16", "fp32".

    Not thread-safe (terngrad keeps the statistics of local_scale() for the
    next encode() of the same buffer): use one Codec per thread.
    """

    def __init__(self, spec="terngrad"):
        if not isinstance(spec, str):
            raise TypeError("spec must be a str, got %s" % type(spec).__name__)
        handle = ctypes.c_void_p()
        check(lib.tg_codec_create(spec.encode(), ctypes.byref(handle)))
        self._handle = handle

    def close(self):
        """Releases the codec (also done when it is garbage collected)."""
        if getattr(self, "_handle", None):
            lib.tg_codec_destroy(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown may have torn down the module already
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _h(self):
        if not self._handle:
            raise ValueError("this Codec is closed")
        return self._handle

    @property
    def spec(self):
        """The canonical spec, e.g. "terngrad:clip=2.5,share_scale=1"."""
        length = ctypes.c_size_t()
        lib.tg_codec_spec(self._h(), None, 0, ctypes.byref(length))  # asks for the length
        buf = ctypes.create_string_buffer(length.value + 1)
        check(lib.tg_codec_spec(self._h(), buf, len(buf), None))
        return buf.value.decode()

    def __repr__(self):
        return "terngrad.Codec(%r)" % (self.spec if self._handle else "<closed>")

    @property
    def wants_shared_scale(self):
        """True if workers should max-reduce local_scale() and pass it to encode()."""
        out = ctypes.c_int()
        check(lib.tg_codec_wants_shared_scale(self._h(), ctypes.byref(out)))
        return bool(out.value)

    @property
    def variable_size(self):
        """True if the payload's length depends on the values (an
        entropy-coded payload): payload_bytes(n) is then only its upper
        bound, and encode() returns the bytes actually used."""
        out = ctypes.c_int()
        check(lib.tg_codec_variable_size(self._h(), ctypes.byref(out)))
        return bool(out.value)

    def payload_bytes(self, n):
        """Size of the payload for n elements: exact for fixed-size codecs,
        the most encode() writes (the capacity) for variable-size ones."""
        if n < 0:
            raise ValueError("n must be >= 0, got %d" % n)
        out = ctypes.c_size_t()
        check(lib.tg_codec_payload_bytes(self._h(), n, ctypes.byref(out)))
        return out.value

    def local_scale(self, grad):
        """This worker's scale for grad (0.0 for fp32/fp16)."""
        out = ctypes.c_float()
        if _is_cuda(grad):
            ptr, n, dtype = _cuda_grad_view(grad)
            check(lib.tg_codec_local_scale_device_typed(self._h(), ptr, n, dtype, _stream_of(grad.device),
                                                        ctypes.byref(out)))
            return out.value
        ptr, n, dtype = _grad_view(grad, "grad")
        check(lib.tg_codec_local_scale_typed(self._h(), ptr, n, dtype, ctypes.byref(out)))
        return out.value

    def encode(self, grad, *, tensor_id=0, step=0, seed=0, shared_scale=None, out=None, check=True):
        """Encodes grad and returns the payload. Into out (a uint8 array,
        tensor or bytearray of at least payload_bytes(n)) when given, else
        into a new uint8 array or tensor, like grad. The payload is the bytes
        written: out itself when they fill it, else its first bytes (a view
        of out, sharing its memory: out[:written]); variable-size codecs
        write fewer than payload_bytes(n). The random stream is a pure
        function of (seed, step, tensor_id, element index): give each worker
        its own seed. shared_scale: the max over workers of local_scale(),
        or None. A CUDA grad is encoded on its device into a CUDA payload
        (fixed-size codecs only: fp32, fp16, 2-bit terngrad without ef);
        check: see the module doc."""
        if _is_cuda(grad):
            return self._encode_device(grad, tensor_id, step, seed, shared_scale, out, check)
        ptr, n, dtype = _grad_view(grad, "grad")
        if out is None:
            out = _new_bytes(self.payload_bytes(n), like=grad)
        optr, cap, _keep = _byte_view(out, "out", writable=True)
        scale = None if shared_scale is None else ctypes.byref(ctypes.c_float(shared_scale))
        written = ctypes.c_size_t()
        _native.check(lib.tg_codec_encode_typed(self._h(), ptr, n, dtype, tensor_id, step, seed, scale, optr, cap,
                                                ctypes.byref(written)))
        if written.value == cap:
            return out
        if isinstance(out, (bytearray, memoryview)):
            return memoryview(out).cast("B")[:written.value]
        return out.reshape(-1)[:written.value]  # contiguous (checked above): a view

    def _encode_device(self, grad, tensor_id, step, seed, shared_scale, out, check):
        import torch
        ptr, n, dtype = _cuda_grad_view(grad)
        if out is None:
            out = torch.empty(self.payload_bytes(n), dtype=torch.uint8, device=grad.device)
        optr, cap = _cuda_view(out, "out", "uint8", grad.device)
        scale = None if shared_scale is None else ctypes.byref(ctypes.c_float(shared_scale))
        written = ctypes.c_size_t()
        stream = _stream_of(grad.device)
        _native.check(lib.tg_codec_encode_device_typed(self._h(), ptr, n, dtype, tensor_id, step, seed, scale, optr,
                                                       cap, stream, ctypes.byref(written)))
        if check:
            _native.check(lib.tg_codec_device_check(self._h(), stream))
        return out if written.value == cap else out.reshape(-1)[:written.value]

    def device_takes(self, dtype):
        """Whether local_scale and encode take CUDA gradients of dtype
        (torch.float32, torch.float16 or torch.bfloat16) directly: terngrad
        any of them, fp32 and fp16 float32 only; False without CUDA."""
        kind = str(dtype).replace("torch.", "")
        if kind not in _GRAD_DTYPES:
            raise TypeError("device_takes: %s is not float32, float16 or bfloat16" % dtype)
        out = ctypes.c_int()
        check(lib.tg_codec_device_takes(self._h(), _GRAD_DTYPES[kind], ctypes.byref(out)))
        return bool(out.value)

    def device_check(self, tensor):
        """Waits for PyTorch's current stream on tensor's CUDA device and
        raises what this codec's device work found since the last check (a
        non-finite input, a malformed payload): the check the CUDA calls
        with check=False leave for later."""
        if not _is_cuda(tensor):
            raise TypeError("device_check: tensor must be a CUDA tensor, got %s" % _describe(tensor))
        check(lib.tg_codec_device_check(self._h(), _stream_of(tensor.device)))

    def encode_slices(self, grad, begins, lengths, *, tensor_id=0, step=0, seed=0, shared_scale=None):
        """Encodes the slices grad[begins[i] : begins[i] + lengths[i]] (each
        begin a multiple of 4) with the whole tensor's statistics, scale and
        random draws, and returns their payloads (new uint8 arrays or tensors,
        like grad): what a reduce-scatter sends, slice j to rank j. CUDA:
        on PyTorch's current stream, checked before returning."""
        if len(begins) != len(lengths):
            raise ValueError("encode_slices: %d begins, %d lengths" % (len(begins), len(lengths)))
        cuda = _is_cuda(grad)
        ptr, n, dtype = _cuda_grad_view(grad) if cuda else _grad_view(grad, "grad")
        count = len(begins)
        outs = [_new_bytes(self.payload_bytes(int(m)), like=grad) for m in lengths]
        views = [_cuda_view(o, "out", "uint8", grad.device) if cuda else _byte_view(o, "out", writable=True)
                 for o in outs]
        c_begins = (ctypes.c_uint64 * max(count, 1))(*begins)
        c_lengths = (ctypes.c_uint64 * max(count, 1))(*lengths)
        c_outs = (ctypes.c_void_p * max(count, 1))(*[v[0] for v in views])
        c_caps = (ctypes.c_size_t * max(count, 1))(*[v[1] for v in views])
        written = (ctypes.c_size_t * max(count, 1))()
        scale = None if shared_scale is None else ctypes.byref(ctypes.c_float(shared_scale))
        args = (self._h(), ptr, n, dtype, count, c_begins, c_lengths, tensor_id, step, seed, scale, c_outs, c_caps)
        if cuda:
            stream = _stream_of(grad.device)
            check(lib.tg_codec_encode_slices_device_typed(*args, stream, written))
            check(lib.tg_codec_device_check(self._h(), stream))
        else:
            check(lib.tg_codec_encode_slices_typed(*args, written))
        return [o if written[i] == c_caps[i] else o.reshape(-1)[:written[i]] for i, o in enumerate(outs)]

    def aggregate(self, payloads, n):
        """The sum of payloads of the same n elements as one payload (a new
        uint8 array or tensor, like the first payload): terngrad payloads with
        one shared scale sum to integer counts without decoding. CUDA
        payloads (terngrad with scale sharing): summed on the device, on
        PyTorch's current stream; errors found there are raised by
        device_check()."""
        if not payloads:
            raise ValueError("aggregate: no payloads")
        if _is_cuda(payloads[0]):
            return self._aggregate_device(payloads, n)
        views = [_byte_view(p, "payloads[%d]" % i, writable=False) for i, p in enumerate(payloads)]
        c_ptrs = (ctypes.c_void_p * len(views))(*[v[0] for v in views])
        c_lens = (ctypes.c_size_t * len(views))(*[v[1] for v in views])
        length = ctypes.c_size_t()
        # A float32 sum is the largest any codec returns; a first try with
        # that capacity, cut to the length written, saves asking twice.
        out = _new_bytes(4 * n + 64, like=payloads[0])
        optr, cap, _keep = _byte_view(out, "out", writable=True)
        check(lib.tg_codec_aggregate(self._h(), c_ptrs, c_lens, len(views), n, optr, cap,
                                     ctypes.byref(length)))
        return out.reshape(-1)[:length.value]

    def _aggregate_device(self, payloads, n):
        import torch
        device = payloads[0].device
        views = [_cuda_view(p, "payloads[%d]" % i, "uint8", device) for i, p in enumerate(payloads)]
        c_ptrs = (ctypes.c_void_p * len(views))(*[v[0] for v in views])
        c_lens = (ctypes.c_size_t * len(views))(*[v[1] for v in views])
        size = self.aggregate_bytes(n, len(views))
        if size is None:
            raise ValueError("aggregate: the sum of CUDA payloads takes terngrad with scale sharing (%s sums on "
                             "the host)" % self.spec)
        out = torch.empty(size, dtype=torch.uint8, device=device)
        length = ctypes.c_size_t()
        check(lib.tg_codec_aggregate_device(self._h(), c_ptrs, c_lens, len(views), n, out.data_ptr(), size,
                                            _stream_of(device), ctypes.byref(length)))
        return out[:length.value]

    def aggregate_bytes(self, n, count):
        """The length aggregate() gives for count payloads of n elements
        encoded with one shared scale, when n and count fix it (2-bit
        terngrad with scale sharing, fp32); None when it depends on the
        payloads."""
        if n < 0 or count < 1:
            raise ValueError("aggregate_bytes: n must be >= 0 and count >= 1, got %d and %d" % (n, count))
        out = ctypes.c_size_t()
        check(lib.tg_codec_aggregate_bytes(self._h(), n, count, ctypes.byref(out)))
        return out.value or None

    def decode_aggregate(self, aggregate, out):
        """out = the sum an aggregate() payload stands for. Returns out.
        CUDA: on the current stream (waits for it to read the sum's header);
        errors in the body are raised by device_check()."""
        if _is_cuda(out):
            optr, n = _cuda_view(out, "out", "float32", out.device)
            aptr, nbytes = _cuda_view(aggregate, "aggregate", "uint8", out.device)
            check(lib.tg_codec_decode_aggregate_device(self._h(), aptr, nbytes, optr, n, _stream_of(out.device)))
            return out
        return self._decode(lib.tg_codec_decode_aggregate, aggregate, out)

    def decode(self, payload, out=None, *, n=None, check=True):
        """out = decoded payload; out is a float32 array/tensor, or None with
        n given (a new NumPy array, or tensor if payload is one, on its
        device). Returns out. CUDA: payload and out on one device; check:
        see the module doc."""
        if out is None:
            if n is None:
                raise ValueError("decode: pass out (a float32 array) or n (the element count)")
            out = _new_floats(n, like=payload)
        if _is_cuda(out):
            return self._decode_device(lib.tg_codec_decode_device, payload, out, check)
        return self._decode(lib.tg_codec_decode, payload, out)

    def decode_accumulate(self, payload, out, *, check=True):
        """out += decoded payload (the all-gather reduction). Returns out.
        CUDA: payload and out on one device; check: see the module doc."""
        if _is_cuda(out):
            return self._decode_device(lib.tg_codec_decode_accumulate_device, payload, out, check)
        return self._decode(lib.tg_codec_decode_accumulate, payload, out)

    def state(self):
        """The codec's state as bytes (ef(...) residuals; b"" for stateless
        codecs): save it with a checkpoint, give it back with load_state()."""
        length = ctypes.c_size_t()
        lib.tg_codec_save_state(self._h(), None, 0, ctypes.byref(length))  # asks for the length
        buf = (ctypes.c_uint8 * max(length.value, 1))()
        check(lib.tg_codec_save_state(self._h(), buf, length.value, None))
        return bytes(buf[:length.value])

    def load_state(self, state):
        """Restores a state() (bytes); a state that is not this codec's raises
        and leaves the codec as it was."""
        data = bytes(state)
        buf = (ctypes.c_uint8 * max(len(data), 1)).from_buffer_copy(data.ljust(1, b"\0"))
        check(lib.tg_codec_load_state(self._h(), buf, len(data)))

    def _decode_device(self, fn, payload, out, check):
        optr, n = _cuda_view(out, "out", "float32", out.device)
        pptr, nbytes = _cuda_view(payload, "payload", "uint8", out.device)
        stream = _stream_of(out.device)
        _native.check(fn(self._h(), pptr, nbytes, optr, n, stream))
        if check:
            _native.check(lib.tg_codec_device_check(self._h(), stream))
        return out

    def _decode(self, fn, payload, out):
        pptr, nbytes, _keep = _byte_view(payload, "payload", writable=False)
        optr, n = _float_view(out, "out", writable=True)
        check(fn(self._h(), pptr, nbytes, optr, n))
        return out


def _new_bytes(size, like):
    if _is_tensor(like):
        import torch
        return torch.empty(size, dtype=torch.uint8, device=like.device)
    import numpy
    return numpy.empty(size, dtype=numpy.uint8)


def _new_floats(n, like):
    if _is_tensor(like):
        import torch
        return torch.empty(n, dtype=torch.float32, device=like.device)
    import numpy
    return numpy.empty(n, dtype=numpy.float32)


__all__ = ["Codec"]
