#!/bin/bash
# One loopback fp32 sync run of LeNet (2 replicas x batch 32, 1 ps), timed.
# usage: run.sh BUILD_DIR STEPS TAG   (runs go to $OUT, default /tmp/lb)
set -u
B=$1; S=$2; T=$3; OUT=${OUT:-/tmp/lb}
mkdir -p "$OUT" && rm -rf "$OUT/$T"
t0=$(date +%s.%N)
"$B/experiments/tg-cluster" --replica_threads=1 --num_ps=1 --num_workers=1 -- --net=lenet --dataset_name=synthetic \
    --synthetic_examples=4096 --batch_size=32 --max_steps="$S" --grad_bits=32 --eval_interval_steps=0 \
    --max_eval_examples=256 --quiet=true --train_dir="$OUT/$T" > "$OUT/$T.log" 2>&1
rc=$?
t1=$(date +%s.%N)
echo "$T rc=$rc wall=$(echo "$t1 - $t0" | bc)"
