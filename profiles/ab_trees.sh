#!/usr/bin/env bash
# A/B of two source trees in one machine start (DSL env sourced, run from the repository root):
#   bash profiles/ab_trees.sh NEW_DIR BASE_DIR new base base new
# NEW_DIR / BASE_DIR: trees holding python/ and cute_kernels/ (e.g. "." and .device/base, a
# `git archive` of main; or .device/wip, main with profiles/wip patches applied). Each tree gets
# its own compile cache (/root/cache_<dir name>), filled first unless FILL=0. Each round, in the
# order given, runs `bench --modes latency` (the latency cases, ceilings timed around each) and,
# unless DECODE=0, `bench --quick --modes decode`, for the kernels in K; with MODE=prefill it
# runs `bench --modes prefill,chunked` instead (K default fp8_mma; ~75 s a round on the H200).
# Logs and bench.json go to $OUT as ab_<round>_<new|base>_<mode>.{log,json}; one status line
# per round.
set -u
new=$1 base=$2; shift 2
MODE=${MODE:-latency}
if [ "$MODE" = prefill ]; then K=${K:-fp8_mma}; else K=${K:-fp8_mma,mma16[fp8kv],mma16[bf16kv],triton[fp8kv]}; fi
OUT=${OUT:-out/ab_trees}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)  # absolute: the rounds write it from inside the trees
source "$(dirname "$0")/tree_cache.sh"
t0=$(date +%s)
if [ "${FILL:-1}" = 1 ]; then
  for dir in "$new" "$base"; do
    ( cd "$dir" && PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=$(cache_of .) timeout 400 \
        python3 -m fa512 compile --fill-cache --jobs 14 > "$OUT/ab_fill_$(basename "$(pwd)").log" 2>&1 )
    echo "fill $dir rc=$? $(( $(date +%s) - t0 ))s"
  done
fi
i=0
for who in "$@"; do
  i=$((i + 1))
  if [ "$who" = new ]; then dir=$new; else dir=$base; fi
  rm -rf "/tmp/ab_${i}_lat" "/tmp/ab_${i}_dec" "/tmp/ab_${i}_pre"  # an earlier call's round i must not pass
  if [ "$MODE" = prefill ]; then
    ( cd "$dir" && export PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=$(cache_of .)
      timeout 300 python3 -m fa512 bench --modes prefill,chunked --no-first-call --kernels "$K" \
        --out "/tmp/ab_${i}_pre" > "$OUT/ab_${i}_${who}_prefill.log" 2>&1 )
    cp "/tmp/ab_${i}_pre/bench.json" "$OUT/ab_${i}_${who}_prefill.json" 2>/dev/null
    echo "round $i $who $(( $(date +%s) - t0 ))s: $(tail -n 1 "$OUT/ab_${i}_${who}_prefill.log" | cut -c1-120)"
    continue
  fi
  ( cd "$dir" && export PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=$(cache_of .)
    timeout 240 python3 -m fa512 bench --modes latency --no-first-call --kernels "$K" --out "/tmp/ab_${i}_lat" \
      > "$OUT/ab_${i}_${who}_latency.log" 2>&1
    if [ "${DECODE:-1}" = 1 ]; then
      timeout 200 python3 -m fa512 bench --quick --modes decode --no-first-call --kernels "${K%,triton*}" \
        --out "/tmp/ab_${i}_dec" > "$OUT/ab_${i}_${who}_decode.log" 2>&1
    fi )
  cp "/tmp/ab_${i}_lat/bench.json" "$OUT/ab_${i}_${who}_latency.json" 2>/dev/null
  cp "/tmp/ab_${i}_dec/bench.json" "$OUT/ab_${i}_${who}_decode.json" 2>/dev/null
  echo "round $i $who $(( $(date +%s) - t0 ))s: $(tail -n 1 "$OUT/ab_${i}_${who}_latency.log" | cut -c1-120)"
done
