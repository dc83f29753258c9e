#!/usr/bin/env bash
# Smoke test of ps_load_bench (ctest Bench.PsLoadSmoke): 4 replicas push
# LeNet's shards to 2 ps processes for 3 steps; the run must complete, its
# JSON must exist and its numbers must be sane (every step timed, each ps's
# peak RSS above its baseline and below a generous bound, RSS sampled). Also:
# --help answers with a usage line, an unknown option is refused, and a step
# timeout far below any real step reports a stall (exit 3) by name.
set -u
tool=${TG_PS_LOAD:?set TG_PS_LOAD to the ps_load_bench binary}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$tool" --help | grep -q '^usage' || fail "--help has no usage line"
if "$tool" --no_such_option=1 2>"$tmp/err"; then fail "an unknown option was accepted"; fi
grep -q usage "$tmp/err" || fail "no usage line for an unknown option"

timeout 240 "$tool" --replicas=4 --num_ps=2 --steps=3 --model=lenet --keep_steps=2 --sample_ms=20 \
  --step_timeout_s=60 --out="$tmp/r.json" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err"; fail "the run failed (status $?)"; }
grep -q '^sync: 3 steps' "$tmp/out" || fail "no summary: $(cat "$tmp/out")"
python3 - "$tmp/r.json" <<'PY' || fail "the JSON's numbers are not sane"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["status"] == "ok", r["status"]
assert r["model"]["parameters"] == 1256080, r["model"]
p = r["phases"][0]
assert p["mode"] == "sync" and p["steps"] == 3 and len(p["step_seconds"]) == 3, p["step_seconds"]
assert all(0 < s < 60 for s in p["step_seconds"]), p["step_seconds"]
assert p["payload_bytes_moved"] > 3 * 4 * r["model"]["payload_bytes_per_replica"]
assert len(p["ps"]) == 2
for q in p["ps"]:
    assert 0 < q["baseline_rss"] <= q["vm_hwm"], q
    assert q["vm_hwm"] < 1 << 30, q  # LeNet's buffers are a few MB
    assert len(q["rss_after_step"]) == 3 and all(x > 0 for x in q["rss_after_step"]), q
    assert q["sum_bytes_per_step"] > 0 and q["push_buffer_bytes"] == 4 * q["payload_bytes_per_replica"], q
    # Not <= vm_hwm: Linux raises the high-water mark lazily (hiwater_rss is
    # updated on unmap and exit paths), so a sample of the current RSS can
    # exceed a VmHWM read later.
    assert 0 < q["max_sampled_rss"] < 1 << 30, q
assert len(p["rss_samples"]["t"]) >= 1 and len(p["rss_samples"]["rss"]) == 2
PY

# A stall: a timeout no AlexNet step on this machine can meet.
timeout 240 "$tool" --replicas=2 --num_ps=1 --steps=2 --model=alexnet --step_timeout_s=0.01 \
  --out="$tmp/s.json" >"$tmp/out" 2>"$tmp/err"
status=$?
[[ $status -eq 3 ]] || { cat "$tmp/err"; fail "a stalled step gave status $status, expected 3"; }
grep -q 'did not complete within --step_timeout_s' "$tmp/err" || fail "the stall message: $(tail -3 "$tmp/err")"
grep -q '"status": "stalled"' "$tmp/s.json" || fail "the stall is not in the JSON"
echo "ok"
