#!/usr/bin/env bash
# Call 2 of the fifteenth session (DSL env sourced): fill this tree's compile cache, and in the
# background (setsid: it outlives the call) the cache of the base (.device/base: git archive of
# c2ad677, main before this session), then run the new split tests as a smoke of the combine.
set -u
export PYTHONPATH=python:.:${PYTHONPATH:-} FA512_CACHE_DIR=/root/fa512cache
mkdir -p /root/bg
t0=$(date +%s)
( cd .device/base && FA512_CACHE_DIR=/root/cache_base PYTHONPATH=python:.:${PYTHONPATH:-} setsid nohup timeout 500 python3 -m fa512 compile --fill-cache --jobs 6 > /root/bg/fill_base.log 2>&1 & )
timeout 400 python3 -m fa512 compile --fill-cache --jobs 10 > $OUT/1_fill_new.log 2>&1; echo "fill_new rc=$? $(( $(date +%s) - t0 ))s"
tail -n 2 $OUT/1_fill_new.log
timeout 150 python3 -m pytest -q -m gpu tests/test_many_splits.py -x -rs -p no:cacheprovider > $OUT/1_many_splits.log 2>&1; echo "many_splits rc=$? $(( $(date +%s) - t0 ))s"
tail -n 15 $OUT/1_many_splits.log
tail -n 2 /root/bg/fill_base.log
