#!/usr/bin/env bash
# The seventeenth session's GPU work, one background chain on one machine start (started by
# s17_start.sh; DSL env sourced; run from the repository root). Trees: "." is main (HEAD of the
# session), .device/wip is main with the three profiles/wip patches applied (patch -p1). Logs go to
# /root/keep; one line per step in /root/keep/progress.txt.
#   1. fill both compile caches (in parallel)
#   2. main: `fa512 fuzz --cases 500 --kernel triton` alone on the quiet GPU, timed (issue 21)
#   3. wip: the whole GPU suite (both halves) and the sanitizers on the changed kernels, together
#   4. quiet GPU: A/B wip vs main, alternating: latency + decode (ab_trees.sh), then prefill/chunked
#   5. wip: the in-kernel timeline of the floor and decode B=1 x 8k
set -u
ROOT=$PWD KD=/root/keep
mkdir -p $KD
export PYTHONPATH=python:.:${PYTHONPATH:-}
t0=$(date +%s)
log() { echo "$(( $(date +%s) - t0 ))s $*" >> $KD/progress.txt; }
ln -sfn /root/cache_main /root/cache_$(basename "$ROOT")   # ab_trees.sh names caches by tree directory
( FA512_CACHE_DIR=/root/cache_main timeout 300 python3 -m fa512 compile --fill-cache --jobs 8 > $KD/1_fill_main.log 2>&1; echo "rc=$?" >> $KD/1_fill_main.log ) &
( cd .device/wip && FA512_CACHE_DIR=/root/cache_wip timeout 300 python3 -m fa512 compile --fill-cache --jobs 8 > $KD/1_fill_wip.log 2>&1; echo "rc=$?" >> $KD/1_fill_wip.log ) &
wait
log "fill: main $(tail -n 2 $KD/1_fill_main.log | tr '\n' ' ') | wip $(tail -n 2 $KD/1_fill_wip.log | tr '\n' ' ')"
s=$(date +%s)
FA512_CACHE_DIR=/root/cache_main timeout 400 python3 -m fa512 fuzz --cases 500 --kernel triton --json $KD/2_fuzz_triton.json > $KD/2_fuzz_triton.log 2>&1
log "fuzz triton rc=$? $(( $(date +%s) - s ))s wall: $(tail -n 1 $KD/2_fuzz_triton.log)"
A="tests/test_cute_compile.py tests/test_native.py tests/test_fp8_operands.py tests/test_emulation.py tests/test_sanitize.py tests/test_garbage_slots.py tests/test_many_splits.py"
B="tests/test_triton_fwd.py tests/test_fuzz.py tests/test_transformers_integration.py tests/test_tools.py tests/test_distributed.py"
cd .device/wip
export FA512_CACHE_DIR=/root/cache_wip
( timeout 1100 python3 -m pytest -q -m gpu --durations=15 $B -rs -p no:cacheprovider > $KD/3_gpu_B.log 2>&1; echo "rc=$?" >> $KD/3_gpu_B.log; log "gpu B: $(grep -E 'passed|failed' $KD/3_gpu_B.log | tail -n 1)" ) &
( timeout 700 python3 -m pytest -q -m gpu --durations=15 $A -rs -p no:cacheprovider > $KD/3_gpu_A.log 2>&1; echo "rc=$?" >> $KD/3_gpu_A.log; log "gpu A: $(grep -E 'passed|failed' $KD/3_gpu_A.log | tail -n 1)" ) &
( timeout 700 python3 -m fa512 sanitize --tools memcheck --timeout 680 > $KD/4_memcheck.log 2>&1; echo "rc=$?" >> $KD/4_memcheck.log; log "memcheck: $(tail -n 2 $KD/4_memcheck.log | tr '\n' ' ')"
  timeout 300 python3 -m fa512 sanitize --tools racecheck,synccheck --only -decode- --timeout 280 > $KD/4_race_decode.log 2>&1; echo "rc=$?" >> $KD/4_race_decode.log; log "race decode: $(tail -n 2 $KD/4_race_decode.log | tr '\n' ' ')"
  timeout 300 python3 -m fa512 sanitize --tools racecheck,synccheck --only promote --timeout 280 > $KD/4_race_promote.log 2>&1; echo "rc=$?" >> $KD/4_race_promote.log; log "race promote: $(tail -n 2 $KD/4_race_promote.log | tr '\n' ' ')" ) &
wait
log "phase 3 done"
cd "$ROOT"; mkdir -p $KD/ab
K=fp8_mma,mma16[bf16kv],triton[fp8kv] FILL=0 OUT=$KD/ab bash profiles/ab_trees.sh .device/wip . new base base new >> $KD/progress.txt 2>&1
i=0
for who in new base base new; do
  i=$((i + 1)); if [ $who = new ]; then dir=.device/wip; c=/root/cache_wip; else dir=.; c=/root/cache_main; fi
  ( cd $dir && FA512_CACHE_DIR=$c timeout 300 python3 -m fa512 bench --modes prefill,chunked --kernels fp8_mma --no-first-call --out /tmp/pf_$i > $KD/ab/pf_${i}_${who}.log 2>&1 )
  cp /tmp/pf_$i/bench.json $KD/ab/pf_${i}_${who}.json 2>/dev/null
  log "prefill round $i $who"
done
( cd .device/wip && FA512_CACHE_DIR=/root/cache_wip timeout 240 python3 profiles/kernel_timeline.py --case "floor,B=1 k=8k" > $KD/6_timeline_wip.log 2>&1 )
log "timeline rc=$?"
log "ALL DONE"
