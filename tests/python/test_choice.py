"""terngrad.choose_codecs / auto_candidates: the "auto" choice of tg-train
through the C API (tg_auto_choose), for a trainer of one's own."""
import unittest

import numpy as np

import terngrad
from terngrad import ddp_choice

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

    def test_ddp_model_counts_each_collectives_bytes_and_steps(self):
        # 4 ranks, 1e6 elements, 1e9 B/s, no latency: a ring all-reduce moves 2 * 3/4 * 4e6 bytes;
        # the reduce-scatter (W >= 4) 3/4 of (n/4 + 160) and 3/4 of (n * bit_width(8) / 8 + 160), plus the scale.
        n, w, rate = 1_000_000, 4, 1e9
        self.assertAlmostEqual(ddp_choice.comm_seconds("fp32", n, w, rate, latency_s=0), 6e6 / rate)
        self.assertAlmostEqual(ddp_choice.comm_seconds("fp16", n, w, rate, latency_s=0), 3e6 / rate)
        rs = (0.75 * (n / 4 + 160) + 0.75 * (n * 4 / 8 + 160) + 4) / rate
        self.assertAlmostEqual(ddp_choice.comm_seconds("ef", n, w, rate, latency_s=0), rs)
        ag = (3 * (n / 4 + 40) + 4) / rate  # below reduce_scatter_from: the all-gather
        self.assertAlmostEqual(ddp_choice.comm_seconds("ef", n, w, rate, reduce_scatter_from=8, latency_s=0), ag)
        self.assertEqual(ddp_choice.parse_rate("1gbit"), 125e6)
        self.assertEqual(ddp_choice.parse_rate("125mbps"), 125e6)
        for bad in ("fast", "0gbit", "-1mbit", "1 parsec"):
            with self.assertRaises(ValueError) as e:
                ddp_choice.parse_rate(bad)
            self.assertIn(repr(bad), str(e.exception))

    def test_ddp_costs_time_a_slice_with_its_own_scale(self):
        # A first slice wider than the rest: its own scale is above the whole tensor's
        # (a shared scale below it was refused before).
        rng = np.random.default_rng(3)
        g = np.concatenate([rng.standard_normal(1 << 18), rng.standard_normal(3 << 18) * 0.01]).astype(np.float32)
        for spec in ("ef(terngrad:round=nearest)", "terngrad"):
            self.assertGreater(ddp_choice._codec_seconds(spec, g, 4), 0)
        costs = ddp_choice.Costs(["fp32", "fp16", "terngrad"], 4)
        self.assertEqual(costs.per_element["fp32"], 0.0)
        self.assertGreater(costs.per_element["terngrad"], 0.0)

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
