#!/usr/bin/env bash
# The whole GPU suite as two concurrent pytest runs (every test file with GPU tests, between them),
# and the racecheck sweep over every dispatched variant in the background (setsid, logs in /root/bg).
set -u
export PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=/root/fa512cache
mkdir -p /root/bg
t0=$(date +%s)
setsid nohup bash -c "timeout 700 python3 -m fa512 sanitize --tools ${SAN:-racecheck} --timeout 680 > /root/bg/san.log 2>&1; echo rc=\$? >> /root/bg/san.log" >/dev/null 2>&1 &
A="tests/test_cute_compile.py tests/test_native.py tests/test_fp8_operands.py tests/test_emulation.py tests/test_sanitize.py tests/test_garbage_slots.py tests/test_many_splits.py"
B="tests/test_triton_fwd.py tests/test_fuzz.py tests/test_transformers_integration.py tests/test_tools.py tests/test_distributed.py"
left=${LEFT:-560}
timeout $left python3 -m pytest -q -m gpu $A -rs -p no:cacheprovider > $OUT/3_gpu_A.log 2>&1 &
pa=$!
timeout $left python3 -m pytest -q -m gpu $B -rs -p no:cacheprovider > $OUT/3_gpu_B.log 2>&1 &
pb=$!
wait $pa; echo "gpu_A rc=$? $(( $(date +%s) - t0 ))s"; wait $pb; echo "gpu_B rc=$? $(( $(date +%s) - t0 ))s"
tail -n 4 $OUT/3_gpu_A.log $OUT/3_gpu_B.log
grep -E "^FAILED|^ERROR" $OUT/3_gpu_A.log $OUT/3_gpu_B.log | head -20
tail -n 3 /root/bg/san.log
