#!/usr/bin/env bash
# Call 2 of the fourteenth session (fresh machine, DSL env sourced): fill the caches of this tree
# and of 5962547 (.device/base), start the four sanitizer sweeps in the background (setsid: they
# outlive this call; logs in /root/bg), and run the whole GPU suite as two concurrent pytest runs.
set -u
export PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=/root/fa512cache
mkdir -p /root/bg
t0=$(date +%s)
( cd .device/base && FA512_CACHE_DIR=/root/cache_base PYTHONPATH=python:.:${PYTHONPATH:-} setsid nohup timeout 500 python3 fill_base.py 5 > /root/bg/fill_base.log 2>&1 & )
timeout 300 python3 -m fa512 compile --fill-cache --jobs 11 > $OUT/fill_new.log 2>&1; echo "fill_new rc=$? $(( $(date +%s) - t0 ))s"
tail -n 2 $OUT/fill_new.log
for t in ${SAN_TOOLS:-memcheck racecheck synccheck initcheck}; do
  setsid nohup bash -c "timeout 900 python3 -m fa512 sanitize --tools $t --timeout 880 > /root/bg/san_$t.log 2>&1; echo rc=\$? >> /root/bg/san_$t.log" >/dev/null 2>&1 &
done
left=$(( 570 - ($(date +%s) - t0) ))
A="tests/test_cute_compile.py tests/test_native.py tests/test_fp8_operands.py tests/test_emulation.py tests/test_sanitize.py tests/test_garbage_slots.py"
B="tests/test_triton_fwd.py tests/test_fuzz.py tests/test_transformers_integration.py tests/test_tools.py tests/test_distributed.py"; BK=${BK:-}
timeout $left python3 -m pytest -q -m gpu $A -rs -p no:cacheprovider > $OUT/gpu_A.log 2>&1 &
pa=$!
timeout $left python3 -m pytest -q -m gpu $B ${BK:+-k "$BK"} -rs -p no:cacheprovider > $OUT/gpu_B.log 2>&1 &
pb=$!
wait $pa; echo "gpu_A rc=$? $(( $(date +%s) - t0 ))s"; wait $pb; echo "gpu_B rc=$? $(( $(date +%s) - t0 ))s"
tail -n 3 $OUT/gpu_A.log $OUT/gpu_B.log
tail -n 2 /root/bg/*.log
