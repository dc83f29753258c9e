"""The Python binding (terngrad.Codec) on NumPy arrays and torch CPU tensors:
float64 references for the scale and the decoded values, zero-copy in-place
outputs, and clear errors for what it refuses. Exits 77 (ctest SKIP) without
numpy."""
import sys
import unittest

try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy is not installed (Debian: python3-numpy)")
    sys.exit(77)
try:
    import torch
except ImportError:
    torch = None

import terngrad
from reference import reference_decode, reference_scale


class CodecTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(7)
        self.g = (rng.standard_normal(10001) * 0.01).astype(np.float32)
        self.g[17] = 0.2  # an outlier the clip cuts

    def test_format_example(self):
        g = np.array([0.5, -1.0, 0.25, 0.0, -0.125, 2.0], np.float32)
        # Format version 2 (the default stream), seed 50; version 1, seed 42.
        c = terngrad.Codec("terngrad:clip=0")
        p = c.encode(g, seed=50, step=7, tensor_id=3)
        self.assertEqual(bytes(p[4:5]) + bytes(p[40:]), b"\x02\x19\x04")
        np.testing.assert_array_equal(c.decode(p, n=6), [2, -2, 2, 0, 0, 2])
        c = terngrad.Codec("terngrad:clip=0,stream=philox10")
        p = c.encode(g, seed=42, step=7, tensor_id=3)
        self.assertEqual(bytes(p[4:5]) + bytes(p[40:]), b"\x01\x01\x04")
        np.testing.assert_array_equal(c.decode(p, n=6), [2, 0, 0, 0, 0, 2])

    def test_scale_and_decode_against_float64(self):
        for clip in (0.0, 2.5):
            c = terngrad.Codec("terngrad:clip=%g" % clip)
            s = c.local_scale(self.g)
            self.assertAlmostEqual(s, reference_scale(self.g, clip), delta=1e-6 * s)
            p = c.encode(self.g, seed=3, step=1, tensor_id=2)
            want, scale = reference_decode(p)
            self.assertEqual(scale, s)
            out = np.full(self.g.size, 0.5, np.float32)
            self.assertIs(c.decode_accumulate(p, out), out)  # in place
            np.testing.assert_array_equal(out, (want + 0.5).astype(np.float32))
            kept = want != 0
            self.assertTrue(np.all(np.sign(want[kept]) == np.sign(self.g[kept])))
            self.assertTrue(np.all(kept[np.abs(self.g) >= s]))  # clipped elements are always kept

    def test_shared_scale_and_determinism(self):
        c = terngrad.Codec("terngrad")
        s = c.local_scale(self.g)
        a = c.encode(self.g, seed=1, step=2, tensor_id=3, shared_scale=2 * s)
        b = c.encode(self.g, seed=1, step=2, tensor_id=3, shared_scale=2 * s)
        self.assertEqual(bytes(a), bytes(b))
        self.assertEqual(reference_decode(a)[1], np.float32(2 * s))
        self.assertNotEqual(bytes(a), bytes(c.encode(self.g, seed=2, step=2, tensor_id=3, shared_scale=2 * s)))
        with self.assertRaisesRegex(terngrad.TernGradError, "TG_ERR_INVALID_ARGUMENT.*shared"):
            c.encode(self.g, shared_scale=s / 2)

    def test_dense_codecs(self):
        fp32, fp16 = terngrad.Codec("fp32"), terngrad.Codec("fp16")
        self.assertEqual(fp32.payload_bytes(10), 16 + 40)
        self.assertFalse(fp16.wants_shared_scale)
        self.assertEqual(fp16.local_scale(self.g), 0.0)
        np.testing.assert_array_equal(fp32.decode(fp32.encode(self.g), n=self.g.size), self.g)
        np.testing.assert_array_equal(fp16.decode(fp16.encode(self.g), n=self.g.size),
                                      self.g.astype(np.float16).astype(np.float32))

    def test_payload_types(self):
        c = terngrad.Codec("terngrad")
        p = c.encode(self.g)
        want = c.decode(p, n=self.g.size)
        for form in (bytes(p), bytearray(p), memoryview(bytearray(p))):
            np.testing.assert_array_equal(c.decode(form, n=self.g.size), want)
        out = np.empty(c.payload_bytes(self.g.size), np.uint8)
        self.assertIs(c.encode(self.g, out=out), out)
        buf = bytearray(len(out))
        c.encode(self.g, out=buf)
        self.assertEqual(bytes(buf), bytes(p))

    def test_payload_is_the_bytes_written(self):
        # Fixed-size codecs fill payload_bytes(n); a larger out gives its
        # first bytes, a view of out (variable-size codecs write fewer:
        # tests/capi/capi_variable_size_test.cpp; the DDP hook's handling:
        # test_ddp_hook.py).
        c = terngrad.Codec("terngrad")
        self.assertFalse(c.variable_size)
        size = c.payload_bytes(self.g.size)
        for out in (np.zeros(size + 5, np.uint8), bytearray(size + 5)):
            p = c.encode(self.g, out=out)
            self.assertEqual(len(p), size)
            self.assertEqual(bytes(p), bytes(c.encode(self.g)))
            np.testing.assert_array_equal(c.decode(p, n=self.g.size), c.decode(c.encode(self.g), n=self.g.size))
        arr = np.zeros(size + 5, np.uint8)
        view = c.encode(self.g, out=arr)
        view[0] ^= 1
        self.assertEqual(arr[0], view[0])  # shares out's memory

    def test_error_feedback_state_resumes(self):
        a, b = terngrad.Codec("ef(fp16):momentum=0.5"), terngrad.Codec("ef(fp16):momentum=0.5")
        self.assertEqual(a.state(), b"")
        for step in range(3):
            a.encode(self.g * (step + 1), step=step)
        b.load_state(a.state())
        np.testing.assert_array_equal(a.encode(self.g, step=3), b.encode(self.g, step=3))
        self.assertEqual(a.state(), b.state())
        bad = bytearray(a.state())
        bad[0] ^= 1
        with self.assertRaisesRegex(terngrad.TernGradError, "magic"):
            b.load_state(bad)
        self.assertEqual(a.state(), b.state())  # kept

    def test_refusals_name_the_problem(self):
        c = terngrad.Codec("terngrad")
        with self.assertRaisesRegex(TypeError, "grad must be float32 or float16, got float64"):
            c.encode(self.g.astype(np.float64))
        with self.assertRaisesRegex(ValueError, "not C-contiguous"):
            c.encode(self.g[::2])
        with self.assertRaisesRegex(TypeError, "numpy.ndarray or torch.Tensor of float32, float16 or bfloat16, got list"):
            c.encode([1.0, 2.0])
        p = c.encode(self.g)
        with self.assertRaisesRegex(ValueError, "read-only"):
            c.encode(self.g, out=bytes(len(p)))
        ro = np.zeros(self.g.size, np.float32)
        ro.flags.writeable = False
        with self.assertRaisesRegex(ValueError, "out is read-only"):
            c.decode_accumulate(p, ro)
        bad = bytearray(p)
        bad[0] ^= 1
        out = np.ones(self.g.size, np.float32)
        with self.assertRaisesRegex(terngrad.TernGradError, "TG_ERR_MALFORMED_PAYLOAD.*magic"):
            c.decode_accumulate(bad, out)
        np.testing.assert_array_equal(out, 1.0)  # untouched
        g = self.g.copy()
        g[9] = np.inf
        with self.assertRaisesRegex(terngrad.TernGradError, "TG_ERR_NON_FINITE.*element 9"):
            c.encode(g)
        with self.assertRaisesRegex(terngrad.TernGradError, "unknown codec \"tern\""):
            terngrad.Codec("tern")
        c.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            c.payload_bytes(1)

    def test_float16_arrays_encode_as_their_float32_values(self):
        h = self.g.astype(np.float16)
        for spec in ("terngrad", "ef(terngrad:round=nearest)", "qsgd"):
            a, b = terngrad.Codec(spec), terngrad.Codec(spec)
            for step in range(3):  # ef's residuals stay equal too
                sa, sb = a.local_scale(h), b.local_scale(h.astype(np.float32))
                self.assertEqual(sa, sb, spec)
                shared = sa if a.wants_shared_scale else None
                self.assertEqual(bytes(a.encode(h, seed=3, step=step, shared_scale=shared)),
                                 bytes(b.encode(h.astype(np.float32), seed=3, step=step, shared_scale=shared)), spec)
            pa = a.encode_slices(h, [0, 8], [8, h.size - 8], seed=1)
            pb = b.encode_slices(h.astype(np.float32), [0, 8], [8, h.size - 8], seed=1)
            self.assertEqual([bytes(x) for x in pa], [bytes(x) for x in pb], spec)

    @unittest.skipIf(torch is None, "torch is not installed (Debian: python3-torch)")
    def test_bfloat16_tensors_encode_as_their_float32_values(self):
        t = torch.from_numpy(self.g.copy()).to(torch.bfloat16)
        c = terngrad.Codec("ef(server_ef(terngrad:round=nearest))")
        f = terngrad.Codec("ef(server_ef(terngrad:round=nearest))")
        s = c.local_scale(t)
        self.assertEqual(s, f.local_scale(t.float()))
        self.assertEqual(bytes(c.encode(t, shared_scale=s).numpy()), bytes(f.encode(t.float(), shared_scale=s).numpy()))
        self.assertEqual(c.state(), f.state())

    @unittest.skipIf(torch is None, "torch is not installed (Debian: python3-torch)")
    def test_torch_tensors_zero_copy(self):
        c = terngrad.Codec("terngrad")
        t = torch.from_numpy(self.g.copy())
        p = c.encode(t, seed=5)
        self.assertIsInstance(p, torch.Tensor)
        self.assertEqual(p.dtype, torch.uint8)
        self.assertEqual(bytes(p.numpy()), bytes(c.encode(self.g, seed=5)))
        acc = torch.zeros(t.numel())
        ptr = acc.data_ptr()
        c.decode_accumulate(p, acc)
        self.assertEqual(acc.data_ptr(), ptr)
        np.testing.assert_array_equal(acc.numpy(), reference_decode(p.numpy())[0].astype(np.float32))
        with self.assertRaisesRegex(TypeError, "must be float32, float16 or bfloat16, got torch.float64"):
            c.encode(t.double())
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            c.encode(t.view(1, -1).expand(2, -1).t())


if __name__ == "__main__":
    print("libterngrad:", terngrad.library_path(), terngrad.version())
    unittest.main()
