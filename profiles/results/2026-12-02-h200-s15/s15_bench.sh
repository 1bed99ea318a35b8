#!/usr/bin/env bash
# bench A/B in one machine start: this tree ("new") against c2ad677 (.device/base, "base"), in the
# order given (e.g. new base base new). Per round: the five latency cases (all variants they list)
# and the --quick decode points, fp8_mma and mma16 on both KV dtypes; ceilings timed around each point.
set -u
K=${K:-fp8_mma,mma16[fp8kv],mma16[bf16kv],triton[fp8kv]}
t0=$(date +%s); i=0
for who in "$@"; do
  i=$((i+1))
  if [ $who = new ]; then dir=.; cache=/root/fa512cache; else dir=.device/base; cache=/root/cache_base; fi
  ( cd $dir && export PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=$cache
    timeout 200 python3 -m fa512 bench --modes latency --no-first-call --kernels "$K" --out /tmp/b_${i}_lat > $OUT/2_bench_${i}_${who}_latency.log 2>&1
    timeout 150 python3 -m fa512 bench --quick --modes decode --no-first-call --kernels "${K%,triton*}" --out /tmp/b_${i}_dec > $OUT/2_bench_${i}_${who}_decode.log 2>&1 )
  cp /tmp/b_${i}_lat/bench.json $OUT/2_bench_${i}_${who}_latency.json 2>/dev/null
  cp /tmp/b_${i}_dec/bench.json $OUT/2_bench_${i}_${who}_decode.json 2>/dev/null
  echo "bench $i $who $(( $(date +%s) - t0 ))s"
done
