#!/usr/bin/env python3
"""experiments/network/auto_report.py's predicted step, by hand.

The estimate's parts are made up; the expected step is the module doc's
formula written out: compute + apply + encode + max(up, server, down) +
decode + 2 round trips, and the old structure for a decision without the
parts (results written before they existed).
"""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "network"))
import auto_report  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


link = {"up_bytes_per_s": 1e6, "down_bytes_per_s": 2e6, "round_trip_ms": 0.5}
est = {"total_ms": 0, "link_ms": 0, "codecs_ms": 70.0, "up_bytes": 100000, "down_bytes": 100000,
       "up_ms": 400.0, "down_ms": 200.0, "encode_ms": 10.0, "decode_ms": 5.0, "server_ms": 55.0}
choice = {"replicas": 4, "num_ps": 1, "link": link, "estimate": est}
# The upload is the slowest of the streamed stages.
got = auto_report.predicted_step_ms(choice, 300.0)
check(math.isclose(got, 300 + 10 + 400 + 5 + 1), f"upload-bound: {got}")
# The ps's sums are.
est["server_ms"] = 600.0
got = auto_report.predicted_step_ms(choice, 100.0)
check(math.isclose(got, 100 + 10 + 600 + 5 + 1), f"server-bound: {got}")
# The download is.
est["server_ms"], est["down_ms"] = 50.0, 700.0
got = auto_report.predicted_step_ms(choice, 100.0)
check(math.isclose(got, 100 + 10 + 700 + 5 + 1), f"download-bound: {got}")
est["down_ms"] = 200.0
# Without the parts: up + max(compute, down) + codecs + 2 round trips, the
# link's times from the bytes (4 replicas on one ps link).
old = {k: est[k] for k in ("total_ms", "link_ms", "codecs_ms", "up_bytes", "down_bytes")}
got = auto_report.predicted_step_ms({"replicas": 4, "num_ps": 1, "link": link, "estimate": old}, 100.0)
check(math.isclose(got, 400 + 200 + 70 + 1), f"old decision: {got}")
check(math.isnan(auto_report.predicted_step_ms({}, 1.0)), "no decision is NaN")

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
