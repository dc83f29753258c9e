"""terngrad.choose_codecs / auto_candidates: the "auto" choice of tg-train
through the C API (tg_auto_choose), for a trainer of one's own."""
import unittest

import terngrad

EF = "ef(server_ef(terngrad:clip=2.5,share_scale=1,round=nearest))"


class ChoiceTest(unittest.TestCase):
    def test_candidates(self):
        self.assertEqual(terngrad.auto_candidates(), ["fp32", "fp16", EF])
        self.assertEqual(terngrad.auto_candidates("auto", sync=False)[2],
                         "ef(terngrad:clip=2.5,share_scale=1,round=nearest)")
        self.assertEqual(terngrad.auto_candidates("auto(fp32,terngrad:clip=2.5,share_scale=1)"),
                         ["fp32", "terngrad:clip=2.5,share_scale=1"])
        with self.assertRaises(terngrad.TernGradError) as e:
            terngrad.auto_candidates("auto(fp32,zstd)")
        self.assertIn("zstd", str(e.exception))
        self.assertEqual(e.exception.status_name, "TG_ERR_INVALID_ARGUMENT")

    def test_slow_link_compresses_and_no_link_does_not(self):
        sizes = [3_000_000, 500, 10]
        specs, seconds = terngrad.choose_codecs(sizes, up_bytes_per_s=125e6, replicas=4, fixed=[0, 0, 1])
        self.assertEqual(specs[0], EF)
        self.assertEqual(specs[2], "fp32")
        self.assertGreater(seconds, 0)
        fp32_link = 4 * (16 + 4 * sum(sizes)) / 125e6  # the model's fp32 link time alone
        self.assertLess(seconds, fp32_link / 2)
        specs, _ = terngrad.choose_codecs(sizes, up_bytes_per_s=0)
        self.assertEqual(specs, ["fp32"] * 3)
        specs, _ = terngrad.choose_codecs(sizes, 125e6, spec="auto(terngrad)", fixed=[0, 0, 1])
        self.assertEqual(specs, ["terngrad:clip=2.5,share_scale=1", "terngrad:clip=2.5,share_scale=1", "fp32"])

    def test_bad_input_is_named(self):
        with self.assertRaises(ValueError):
            terngrad.choose_codecs([1, 2], 1e6, fixed=[0])
        with self.assertRaises(terngrad.TernGradError) as e:
            terngrad.choose_codecs([100], -5.0)
        self.assertIn("must be finite and >= 0", str(e.exception))
        with self.assertRaises(terngrad.TernGradError):
            terngrad.choose_codecs([100], 1e6, replicas=0)


if __name__ == "__main__":
    unittest.main()
