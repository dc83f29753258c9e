#!/usr/bin/env bash
# TernGrad's step at 1 Gbit/s against the performance model's bound (issue 35):
# LeNet, 4 replicas x batch 32, 1 ps, synthetic data, --grad_bits=2 (the
# paper's TernGrad: shared scales, the ps's exact sum), every run a tg-cluster
# run. The model (experiments/network/perf_model.py) with full overlap and an
# ideal link is t_fwd + max(t_bwd, t_comm) + t_codec: the step without a link
# limit, unless the link's busier direction takes longer than the backward
# pass. "Without a link limit" is measured over the same path as the shaped
# runs (namespaces, veth, tc tbf) at 40 Gbit/s, and on loopback beside it;
# t_comm is the ps link's busier direction (the sums out) at 1 Gbit/s.
# Each configuration runs SHORT and LONG steps; examples/s is
# (LONG - SHORT) x 128 over the difference of the two wall times, so start-up,
# the final evaluation and the checkpoint cancel. The rates are interleaved,
# REPS times. Writes OUT/runs.tsv and prints the ratios. Needs root.
#   experiments/network/terngrad_bound.sh BUILD OUT [REPS]
set -euo pipefail
if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: terngrad_bound.sh BUILD OUT [REPS]" >&2
  exit 2
fi
build=$1 out=$2 reps=${3:-3}
short=100 long=400 replicas=4 batch=32
[[ -x $build/experiments/tg-cluster && -x $build/experiments/tg-train ]] ||
  { echo "terngrad_bound.sh: no tg-cluster / tg-train in $build/experiments (build them first)" >&2; exit 2; }
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "terngrad_bound.sh: REPS must be a positive integer, got '$reps'" >&2; exit 2; }
mkdir -p "$out"
printf 'rep\tlink\tsteps\twall_s\tsum_bytes_out_per_step\n' > "$out/runs.tsv"
one() {  # rep link steps
  local rep=$1 link=$2 steps=$3 net=()
  local dir; dir=$(mktemp -d /tmp/tg_terngrad_bound.XXXXXX)
  [[ $link != loopback ]] && net=(--link_rate="$link")
  local t0 t1
  t0=$(date +%s.%N)
  "$build/experiments/tg-cluster" "${net[@]}" --replica_threads=1 --num_ps=1 --num_workers=$((replicas - 1)) -- \
    --net=lenet --dataset_name=synthetic --synthetic_examples=4096 --batch_size=$batch --max_steps="$steps" \
    --grad_bits=2 --eval_interval_steps=0 --max_eval_examples=256 --train_dir="$dir" > "$dir/launcher.log" 2>&1
  t1=$(date +%s.%N)
  local recv
  recv=$(python3 -c "import json;print(json.load(open('$dir/result.json'))['wire_bytes_recv_per_worker_step'])")
  printf '%s\t%s\t%s\t%s\t%s\n' "$rep" "$link" "$steps" "$(python3 -c "print(round($t1 - $t0, 3))")" \
    "$(python3 -c "print(round($recv * $replicas))")" | tee -a "$out/runs.tsv"
  [[ $steps == "$long" ]] && cp "$dir/launcher.log" "$out/rep${rep}_${link}_launcher.log"
  [[ $steps == "$long" && -f $dir/metrics.jsonl ]] && tail -n 3 "$dir/metrics.jsonl" > "$out/rep${rep}_${link}_metrics_tail.jsonl"
  rm -rf "$dir"
}
for rep in $(seq "$reps"); do
  for link in loopback 40gbit 1gbit; do
    one "$rep" "$link" "$short"
    one "$rep" "$link" "$long"
  done
done
python3 - "$out/runs.tsv" "$short" "$long" "$replicas" "$batch" <<'EOF'
import csv, statistics, sys
path, short, long_, replicas, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = list(csv.DictReader(open(path), delimiter="\t"))
walls = {}
out_bytes = []
for r in rows:
    walls[(r["rep"], r["link"], int(r["steps"]))] = float(r["wall_s"])
    if r["link"] == "1gbit":
        out_bytes.append(float(r["sum_bytes_out_per_step"]))
step = {}
for (rep, link, steps), w in walls.items():
    if steps == long_ and (rep, link, short) in walls:
        step.setdefault(link, []).append((w - walls[(rep, link, short)]) / (long_ - short) * 1e3)
for link, v in step.items():
    print("%-8s step %s ms (median %.1f; %.0f examples/s)" % (link, ", ".join("%.1f" % x for x in v),
          statistics.median(v), replicas * batch / statistics.median(v) * 1e3))
t_comm = statistics.median(out_bytes) * 8 / 1e9 * 1e3
bound = max(statistics.median(step["40gbit"]), t_comm)
print("t_comm at 1 Gbit/s (the sums out, wire bytes): %.1f ms; the model's bound: %.1f ms" % (t_comm, bound))
print("1gbit / bound: %.3f (target <= 1.10); 1gbit / loopback: %.3f" % (
    statistics.median(step["1gbit"]) / bound, statistics.median(step["1gbit"]) / statistics.median(step["loopback"])))
EOF
