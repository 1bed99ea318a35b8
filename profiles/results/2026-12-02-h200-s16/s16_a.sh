#!/usr/bin/env bash
# Call 2 of the sixteenth session (DSL env sourced): fill the compile cache, time the split
# breakdown on a quiet GPU, then start in the background (setsid, logs in /root/keep) the whole
# GPU suite (half B, then half A) and the synccheck + initcheck sweep.
set -u
export PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=/root/fa512cache
mkdir -p /root/keep
t0=$(date +%s)
timeout 400 python3 -m fa512 compile --fill-cache --jobs 14 > $OUT/1_fill.log 2>&1; echo "fill rc=$? $(( $(date +%s) - t0 ))s"
tail -n 2 $OUT/1_fill.log
for k in ${BREAKDOWN-fp8_mma mma16-bf16}; do
  timeout 200 python3 profiles/split_breakdown.py --kernel $k > $OUT/2_split_breakdown_$k.log 2>&1; echo "breakdown $k rc=$? $(( $(date +%s) - t0 ))s"
  cat $OUT/2_split_breakdown_$k.log | tail -n 12
done
timeout 200 python3 profiles/latency_kernels.py --case "floor,B=1 k=8k,MTP q=4 B=1" --splits 0,1,8 > $OUT/2_latency_kernels.log 2>&1; echo "latency_kernels rc=$? $(( $(date +%s) - t0 ))s"
grep -v Warn $OUT/2_latency_kernels.log | tail -n 40
A="tests/test_cute_compile.py tests/test_native.py tests/test_fp8_operands.py tests/test_emulation.py tests/test_sanitize.py tests/test_garbage_slots.py tests/test_many_splits.py"
B="tests/test_triton_fwd.py tests/test_fuzz.py tests/test_transformers_integration.py tests/test_tools.py tests/test_distributed.py"
setsid nohup bash -c "cd $PWD; timeout 900 python3 -m pytest -q -m gpu $B -rs -p no:cacheprovider > /root/keep/3_gpu_B.log 2>&1; echo rc=\$? >> /root/keep/3_gpu_B.log; timeout 600 python3 -m pytest -q -m gpu $A -rs -p no:cacheprovider > /root/keep/3_gpu_A.log 2>&1; echo rc=\$? >> /root/keep/3_gpu_A.log" >/dev/null 2>&1 < /dev/null &
setsid nohup bash -c "cd $PWD; timeout 900 python3 -m fa512 sanitize --tools synccheck,initcheck --timeout 880 > /root/keep/4_sanitize.log 2>&1; echo rc=\$? >> /root/keep/4_sanitize.log" >/dev/null 2>&1 < /dev/null &
sleep 5; echo started background $(( $(date +%s) - t0 ))s
