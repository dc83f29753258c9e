#!/usr/bin/env bash
# Soak run (issue 36): a sync LeNet / Fashion-MNIST cluster (a chief, 3 workers, 2 ps) under
# tg-cluster --restart_failed, a seeded random task (chief, worker or ps) SIGKILLed every 2 to 3
# minutes, every link shaped (as root; loopback otherwise). Then the same run in one process,
# unfaulted. It reports: every task's exit, the kills, catch-ups (a restarted replica) and
# rewinds (a restarted ps), whether the faulted run's weights equal the unfaulted run's bit for
# bit (sync replicas catch up exactly, and a rewind computes the same steps again:
# docs/distributed.md), both runs' top-1, and the ps processes' resident memory (peak, and slope
# after warm-up; a restarted ps is back at its size within a 10 s sample).
#
#   scripts/soak.sh [--build DIR] [--out DIR] [--steps N] [--link_rate RATE] [--kill_every A:B]
#                   [--kill_types chief,worker,ps] [--seed S]
#
# Not a CI test: about 10 minutes here at the defaults (bench/RESULTS.md has the figures).
set -euo pipefail

build=build out=/tmp/tg_soak steps=6000 link_rate=1gbit kill_every=120:180 kill_types=chief,worker,ps seed=7
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --link_rate) link_rate=$2; shift 2 ;;
    --kill_every) kill_every=$2; shift 2 ;;
    --kill_types) kill_types=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x $build/experiments/tg-cluster && -x $build/experiments/tg-train ]] ||
  { echo "soak.sh: no tg-cluster / tg-train in $build/experiments (build first)" >&2; exit 2; }
rm -rf "$out" && mkdir -p "$out"

# The paper's LeNet settings; checkpoints every 100 steps and a rejoin window above that.
flags=(--net=lenet --batch_size=32 --optimizer=momentum --momentum=0.9 --initial_learning_rate=0.01
       --learning_rate_decay_type=polynomial --learning_rate_power=0.5 --weight_decay=0.0005
       --grad_bits=2 --max_steps="$steps" --save_interval_steps=100 --rejoin_window_steps=150
       --eval_interval_steps=0 --moving_average_decay=0 --seed="$seed")
link=()
if [[ $(id -u) == 0 ]]; then link=(--link_rate="$link_rate"); else echo "soak.sh: not root: loopback, no shaped links"; fi

echo "soak.sh: faulted cluster run, $steps steps, a task of $kill_types killed every $kill_every s (seed $seed)"
t0=$(date +%s)
set +e
"$build/experiments/tg-cluster" "${link[@]}" --num_ps=2 --num_workers=3 --replica_threads=1 \
  --restart_failed=100 --kill_every_secs="$kill_every" --kill_seed="$seed" --kill_types="$kill_types" \
  --timeout_secs=3600 -- "${flags[@]}" --peer_timeout_secs=60 --train_dir="$out/faulted" 2>&1 |
  grep --line-buffered -v '^step ' | tee "$out/faulted.log"
faulted_rc=${PIPESTATUS[0]}
set -e
t1=$(date +%s)
echo "soak.sh: unfaulted run in one process (4 virtual workers)"
"$build/experiments/tg-train" "${flags[@]}" --num_nodes=4 --threads=2 --quiet=true --train_dir="$out/straight" \
  > "$out/straight.log" 2>&1
t2=$(date +%s)

python3 - "$out" "$faulted_rc" $((t1 - t0)) $((t2 - t1)) <<'EOF'
import json, os, sys
out, rc, faulted_s, straight_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
log = open(os.path.join(out, "faulted.log")).read()
kills = log.count("fault injection: killing")
restarts = log.count("starting it again")
logs = os.path.join(out, "faulted", "logs")
def count(what, prefix=""):
    return sum(open(os.path.join(logs, f)).read().count(what) for f in os.listdir(logs)
               if f.endswith(".log") and f.startswith(prefix))
caught = count("caught up")
rewinds = count("rewound from step", "chief")
same = open(os.path.join(out, "faulted", "model.safetensors"), "rb").read() == \
       open(os.path.join(out, "straight", "model.safetensors"), "rb").read() if rc == 0 else False
def top1(d):
    p = os.path.join(out, d, "result.json")
    return json.load(open(p))["top1"] * 100 if os.path.exists(p) else float("nan")
rows = [json.loads(l) for l in open(os.path.join(logs, "rss.jsonl"))]
lines = [f"- faulted cluster: exit {rc} after {faulted_s} s; {kills} kills, {restarts} restarts, "
         f"{caught} catch-ups, {rewinds} rewinds; unfaulted in-process run {straight_s} s",
         f"- weights equal bit for bit: {same}; top-1 faulted {top1('faulted'):.2f}%, unfaulted {top1('straight'):.2f}%"]
for ps in sorted({k for r in rows for k in r if k.startswith("ps")}):
    pts = [(r["seconds"], r[ps] / 1024) for r in rows if ps in r]
    late = [p for p in pts if p[0] >= 60] or pts
    restarted = log.count(ps + " was killed by signal")
    n = len(late)
    mx, my = sum(p[0] for p in late) / n, sum(p[1] for p in late) / n
    var = sum((p[0] - mx) ** 2 for p in late)
    slope = sum((p[0] - mx) * (p[1] - my) for p in late) / var * 60 if var > 0 else 0.0
    lines.append(f"- {ps} resident memory: peak {max(p[1] for p in pts):.1f} MiB, after the first minute "
                 f"{min(p[1] for p in late):.1f} to {max(p[1] for p in late):.1f} MiB, slope {slope:+.2f} MiB/min "
                 f"({len(pts)} samples; {restarted} restarts, each refilled within a sample)")
text = "\n".join(lines) + "\n"
open(os.path.join(out, "soak.md"), "w").write(text)
print(text, end="")
sys.exit(0 if rc == 0 and same else 1)
EOF
