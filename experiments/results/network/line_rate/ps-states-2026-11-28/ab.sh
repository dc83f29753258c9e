#!/bin/bash
# Interleaved: base (before the state change) and new, AlexNet comm-only ef(server_ef) 4 replicas.
set -u
cd /work/main
for rep in 1 2; do
  for rate in 1gbit 10gbit; do
    for b in base new; do
      if [ $b = base ]; then B=/tmp/base49/build; else B=build; fi
      /usr/bin/python3 experiments/network/run_grid.py --build=$B --out=/tmp/s49/ab/${b}_${rate}_$rep --nets= \
        --alexnet=4:1:$rate --codecs=ef-server-ef-nearest --alexnet_steps=32 --no_tta > /tmp/s49/ab/${b}_${rate}_$rep.log 2>&1
      echo "$b $rate $rep $(grep '^| alexnet' /tmp/s49/ab/${b}_${rate}_$rep.log | cut -d'|' -f7)"
    done
  done
done
/usr/bin/python3 experiments/network/run_grid.py --build=build --out=/tmp/s49/ab/fp32_1gbit --nets= \
  --alexnet=4:1:1gbit --codecs=fp32 --alexnet_steps=12 --no_tta > /tmp/s49/ab/fp32_1gbit.log 2>&1
echo "fp32 1gbit $(grep '^| alexnet' /tmp/s49/ab/fp32_1gbit.log | cut -d'|' -f7)"
