#!/usr/bin/env bash
# A first, short look at one profiles/wip patch on the GPU machine, as a detached chain (DSL env
# sourced, repository root = main): build its tree, its decode correctness tests and a 100-case
# fp8_mma fuzz there, then `bench --modes latency` (fp8_mma) in the tree and in main, rounds new /
# main / main / new, and EXTRA (shell commands run in the tree). ~3 minutes; the whole suite and the
# full A/B are wip_session.sh's. Logs in /root/keep (progress.txt); `poll` leaves $OUT/keep.tgz.
#   PATCH=name [EXTRA="cmd"] bash profiles/wip_probe.sh start && bash profiles/wip_probe.sh poll 420
# (session 27 ran this for decode_alt: profiles/results/2026-12-04-h200-s27/probe/)
set -u
KD=/root/keep
if [ "${1:-}" = poll ]; then
  end=$(( $(date +%s) + ${2:-500} ))
  while [ "$(date +%s)" -lt $end ]; do
    grep -q "ALL DONE" $KD/progress.txt 2>/dev/null && break
    sleep 5
  done
  mkdir -p "${OUT:-out}" && tar czf "${OUT:-out}/keep.tgz" -C $KD . 2>/dev/null
  cat $KD/progress.txt 2>/dev/null; exit 0
fi
if [ "${1:-}" = start ]; then
  [ -n "${PATCH:-}" ] || { echo "PATCH=<name of profiles/wip/<name>.patch> is needed"; exit 2; }
  rm -rf $KD && mkdir -p $KD
  rm -rf /root/probe_main && mkdir -p /root/probe_main  # a snapshot: a later device call re-copies the tree
  tar --exclude=./.device --exclude=./profiles/results -cf - . | tar -xf - -C /root/probe_main
  ( cd /root/probe_main && PATCH=$PATCH EXTRA=${EXTRA:-} setsid nohup bash profiles/wip_probe.sh chain \
      > $KD/chain.log 2>&1 < /dev/null & )
  sleep 1; echo "started: PATCH=$PATCH"; exit 0
fi
[ "${1:-}" = chain ] || { echo "usage: $0 start | poll [SECONDS]"; exit 2; }
export PYTHONPATH=python:.:${PYTHONPATH:-}
t0=$(date +%s)
log() { echo "$(( $(date +%s) - t0 ))s $*" >> $KD/progress.txt; }
OUT=$KD bash profiles/wip_trees.sh build "$PATCH" >> $KD/progress.txt 2>&1
T=/root/wip_$PATCH TC=/root/cache_wip_$PATCH
( cd $T && FA512_CACHE_DIR=$TC timeout 300 python3 -m pytest -q -m gpu \
    tests/test_many_splits.py tests/test_garbage_slots.py -x > $KD/quick_tests.log 2>&1 )
log "quick tests rc=$? $(tail -n 1 $KD/quick_tests.log | cut -c1-120)"
( cd $T && FA512_CACHE_DIR=$TC timeout 200 python3 -m fa512 fuzz --kernel fp8_mma --cases 100 --seed 27 \
    > $KD/fuzz.log 2>&1 )
log "fuzz rc=$? $(tail -n 2 $KD/fuzz.log | tr '\n' ' ' | cut -c1-160)"
i=0
for who in new base base new; do
  i=$((i + 1))
  dir=$T cache=$TC
  [ $who = base ] && dir=/root/probe_main && cache=/root/cache_probe_main
  ( cd $dir && FA512_CACHE_DIR=$cache timeout 200 python3 -m fa512 bench --modes latency --no-first-call \
      --kernels fp8_mma --out /tmp/lat_$i > $KD/lat_${i}_$who.log 2>&1 )
  cp /tmp/lat_$i/bench.json $KD/lat_${i}_$who.json 2>/dev/null
  log "latency $i $who rc=$?"
done
if [ -n "${EXTRA:-}" ]; then
  ( cd $T && FA512_CACHE_DIR=$TC bash -c "$EXTRA" > $KD/extra.log 2>&1 )
  log "extra rc=$?"
fi
log "ALL DONE"
