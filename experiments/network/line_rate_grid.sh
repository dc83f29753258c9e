#!/usr/bin/env bash
# The fp32 ps against the link bound (issue 35): LeNet, batch 32 per replica,
# 1 ps, synthetic data, every run a tg-cluster run over tc-shaped links (or
# loopback). Runs each configuration with two builds in turn (BASE, then NEW),
# so a change is measured against its baseline on the same machine (both
# launched by NEW's tg-cluster, which measures the ps link's idle time), and
# writes one line per run to OUT/runs.tsv plus each run's result.json and
# link_stats.json. Needs root (network namespaces).
#   experiments/network/line_rate_grid.sh BASE_BUILD NEW_BUILD OUT [REPS]
# LINE_RATE_CONFIGS="mode replicas link steps;..." runs those configurations
# instead of the grid below (e.g. "async 4 1gbit 300;sync 2 loopback 300").
# LINE_RATE_CLUSTER_FLAGS adds tg-cluster flags to every run (e.g.
# "--tcp_congestion=host": the machine's TCP congestion control, not cubic).
set -euo pipefail
if [[ $# -lt 3 || $# -gt 4 ]]; then
  echo "usage: line_rate_grid.sh BASE_BUILD NEW_BUILD OUT [REPS]" >&2
  exit 2
fi
base=$1 new=$2 out=$3 reps=${4:-2}
for b in "$base" "$new"; do
  [[ -x $b/experiments/tg-train ]] || { echo "line_rate_grid.sh: no tg-train in $b/experiments (build it first)" >&2; exit 2; }
done
[[ -x $new/experiments/tg-cluster ]] || { echo "line_rate_grid.sh: no tg-cluster in $new/experiments" >&2; exit 2; }
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "line_rate_grid.sh: REPS must be a positive integer, got '$reps'" >&2; exit 2; }
mkdir -p "$out"
printf 'build\tmode\treplicas\tlink\tsteps\texamples_per_s\tps_in_idle_ms_per_step\tps_out_idle_ms_per_step\tstep_ms\n' > "$out/runs.tsv"
one() {  # label build mode replicas link steps
  local label=$1 build=$2 mode=$3 replicas=$4 link=$5 steps=$6
  local dir; dir=$(mktemp -d /tmp/tg_line_rate.XXXXXX)
  local net=() sync=()
  [[ $link != loopback ]] && net=(--link_rate="$link")
  # Async at lr 0.01 / replicas: at the default 0.01 (momentum 0.9) stale gradients threw
  # 4-replica runs into divergence on an AMD Zen 3 (3 runs of 4), and at 0.005 still 2 of 6
  # (2026-11-29); staleness grows with the replicas. The work per step is the same at any rate.
  [[ $mode == async ]] && sync=(--sync_replicas=false --initial_learning_rate="$(python3 -c "print(0.01 / $replicas)")")
  local cluster_flags=()
  read -r -a cluster_flags <<< "${LINE_RATE_CLUSTER_FLAGS:-}"
  "$new/experiments/tg-cluster" --tg_train="$build/experiments/tg-train" "${net[@]}" "${cluster_flags[@]}" --replica_threads=1 --num_ps=1 --num_workers=$((replicas - 1)) -- \
    --net=lenet --dataset_name=synthetic --synthetic_examples=4096 --batch_size=32 --max_steps="$steps" \
    --grad_bits=32 --eval_interval_steps=0 --max_eval_examples=256 --train_dir="$dir" "${sync[@]}" > "$dir/launcher.log" 2>&1
  local rate idle_in=- idle_out=- step_ms=-
  rate=$(python3 -c "import json;print(round(json.load(open('$dir/result.json'))['examples_per_sec'],1))")
  if [[ -f $dir/logs/link_stats.json ]] && grep -q in_idle_ms_per_step "$dir/logs/link_stats.json"; then
    read -r idle_in idle_out step_ms < <(python3 -c "
import json;i=json.load(open('$dir/logs/link_stats.json'))['ps_link_idle']
print(round(i['in_idle_ms_per_step'],1), round(i['out_idle_ms_per_step'],1), round(i['step_ms'],1))")
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$mode" "$replicas" "$link" "$steps" "$rate" "$idle_in" "$idle_out" "$step_ms" | tee -a "$out/runs.tsv"
  local name="${label}_${mode}_${replicas}r_${link}"
  cp "$dir/result.json" "$out/${name}_result.json"
  [[ -f $dir/logs/link_stats.json ]] && cp "$dir/logs/link_stats.json" "$out/${name}_link_stats.json"
  [[ -f $dir/logs/ps_link_timeline.csv ]] && cp "$dir/logs/ps_link_timeline.csv" "$out/${name}_ps_link_timeline.csv"
  rm -rf "$dir"
}
configs="sync 2 1gbit 200;sync 4 1gbit 120;async 2 1gbit 300;async 4 1gbit 300;sync 2 loopback 300"
IFS=';' read -r -a grid <<< "${LINE_RATE_CONFIGS:-$configs}"
for rep in $(seq "$reps"); do
  for cfg in "${grid[@]}"; do
    # shellcheck disable=SC2086
    one base "$base" $cfg
    # shellcheck disable=SC2086
    one new "$new" $cfg
  done
done
