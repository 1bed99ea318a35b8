#!/usr/bin/env bash
# Call 2 of the second machine start (DSL env sourced): the in-kernel timeline and the entry cuts
# of the floor and decode B=1 cases (profiles/kernel_timeline.py), then issue 25's 4k-token
# transformers comparison on what time is left.
set -u
export PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=/root/fa512cache
t0=$(date +%s)
timeout 230 python3 profiles/kernel_timeline.py --case "floor,B=1 k=8k" > $OUT/5_kernel_timeline.log 2>&1; echo "timeline rc=$? $(( $(date +%s) - t0 ))s"
grep -v -i warn $OUT/5_kernel_timeline.log | tail -n 70
timeout ${HF:-170} python3 profiles/transformers_gemma4.py --prompt-len 4096 --new-tokens 32 > $OUT/6_hf_4k.log 2>&1; echo "hf_4k rc=$? $(( $(date +%s) - t0 ))s"
tail -n 25 $OUT/6_hf_4k.log
