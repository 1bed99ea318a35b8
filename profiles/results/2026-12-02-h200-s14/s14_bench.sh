#!/usr/bin/env bash
# bench --quick A/B in one machine start: this tree ("new") against 5962547 (.device/base,
# "base"), alternating in the order given, e.g. `bash s14_bench.sh new base new base`.
# Waits first (up to WAIT seconds) for the background sanitizer sweeps so that nothing else runs.
set -u
K=${K:-fp8_mma,mma16[fp8kv],mma16[bf16kv]}
t0=$(date +%s)
while [ $(( $(date +%s) - t0 )) -lt ${WAIT:-0} ] && pgrep -f "fa512 sanitize" >/dev/null; do sleep 5; done
echo "sanitizers still running: $(pgrep -fc 'fa512 sanitize')"
i=0
for who in "$@"; do
  i=$((i+1))
  if [ $who = new ]; then
    ( export PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=/root/fa512cache
      timeout 280 python3 -m fa512 bench --quick --no-first-call --kernels "$K" --out $OUT/bench_${i}_new > $OUT/bench_${i}_new.log 2>&1 )
  else
    ( cd .device/base && export PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=/root/cache_base
      timeout 280 python3 -m fa512 bench --quick --no-first-call --kernels "$K" --out $OUT/bench_${i}_base > $OUT/bench_${i}_base.log 2>&1 )
  fi
  echo "bench $i $who rc=$? $(( $(date +%s) - t0 ))s"
done
