#!/usr/bin/env bash
# Session 31's (and 32's `sanitize`) extra GPU steps for wip_session.sh (temporary; run by its BESIDE, beside the GPU
# suite, from the chain's snapshot of main, DSL env sourced; /root/wip_final = main + decode_alt.patch;
# the latency A/B is the chain's AB=final, after the suite, with K=fp8_mma):
#   K=fp8_mma PATCHES= FINAL=decode_alt AB=final BESIDE="bash profiles/s31_steps.sh beside" \
#     bash profiles/wip_session.sh start
set -u
KD=/root/keep
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
T=/root/wip_final
in_final() { ( cd $T && PYTHONPATH=python:.:tests:${PYTHONPATH:-} FA512_CACHE_DIR=/root/cache_wip_final "$@" ); }
case $1 in
  beside)
    # 1. does racecheck order a 256-thread merge by barrier counts? (3/1: a one-block CTA's counts)
    timeout 60 python3 profiles/racecheck_barrier_probe.py --mode merge
    for lc in "3 1" "1 1" "3 3" "1 3"; do
      set -- $lc
      echo "== racecheck merge local0=$1 local1=$2"
      timeout 120 $CS --tool racecheck python3 profiles/racecheck_barrier_probe.py --mode merge --local0 $1 --local1 $2 2>&1 \
        | grep -E "RACECHECK SUMMARY|probe|hazard detected" | head -4
    done
    # 2. the case that faulted at three stages: eager, against the emulation, then under memcheck
    echo "== b8 eager"; in_final timeout 200 python3 profiles/decode_alt_probe.py b8
    echo "== b8 eager, 32 splits"; in_final timeout 200 python3 profiles/decode_alt_probe.py b8 32
    echo "== b8 memcheck"; in_final timeout 300 $CS --tool memcheck python3 profiles/decode_alt_probe.py b8 2>&1 | tail -4
    # 3. memcheck and racecheck over every decode_alt variant
    in_final timeout 600 python3 -m fa512 sanitize --tools memcheck,racecheck --only=decode_alt --jobs 8 \
      > $KD/sanitize_decode_alt.log 2>&1
    echo "sanitize rc=$? $(grep -E 'clean|FAILED' $KD/sanitize_decode_alt.log | tr '\n' ' ')" ;;
  sanitize)  # session 32: only memcheck and racecheck over the decode_alt variants, in final
    in_final timeout 600 python3 -m fa512 sanitize --tools memcheck,racecheck --only=decode_alt --jobs 8 \
      > $KD/sanitize_decode_alt.log 2>&1
    echo "sanitize rc=$? $(grep -E 'clean|FAILED' $KD/sanitize_decode_alt.log | tr '\n' ' ')" ;;
esac
# second start (the first's kernel half failed one test the patch had not updated, and its
# probes ran without the DSL on the path), on a fresh machine: a snapshot of main with its cache
# and the fixed tree with its own, filled; the latency A/B on the quiet GPU; then the emulation
# GPU tests beside the probes and sanitize. Detached: `bash profiles/s31_steps.sh again_start`,
# then `bash profiles/wip_probe.sh poll 500` (same /root/keep, same "ALL DONE").
if [ "$1" = again_start ]; then
  rm -rf $KD /root/chain_main && mkdir -p $KD /root/chain_main
  tar --exclude=./.device --exclude=./profiles/results -cf - . | tar -xf - -C /root/chain_main
  ( cd /root/chain_main && setsid nohup bash profiles/s31_steps.sh again > $KD/chain.log 2>&1 < /dev/null & )
  sleep 1; echo started; exit 0
fi
if [ "$1" = again ]; then
  t0=$(date +%s); log() { echo "$(( $(date +%s) - t0 ))s $*" >> $KD/progress.txt; }
  OUT=$KD bash profiles/wip_trees.sh build_set final decode_alt >> $KD/progress.txt 2>&1
  OUT=$KD bash profiles/wip_trees.sh fill final >> $KD/progress.txt 2>&1
  log "filled"
  K=fp8_mma FILL=0 OUT=$KD/ab bash profiles/ab_trees.sh $T . new base base new >> $KD/progress.txt 2>&1
  log "ab done"
  in_final timeout 300 python3 -m pytest -q -m gpu tests/test_emulation.py > $KD/emulation_gpu.log 2>&1 &
  # (device time is short: the racecheck probe ran in the first start; b8 runs inside the A/B's
  # latency case "decode B=8")
  in_final timeout 400 python3 -m fa512 sanitize --tools memcheck,racecheck --only=decode_alt --jobs 8 \
    > $KD/sanitize_decode_alt.log 2>&1
  echo "sanitize rc=$? $(grep -E 'clean|FAILED' $KD/sanitize_decode_alt.log | tr '\n' ' ')" > $KD/beside.log
  # session 33: racecheck per block count (profiles/racecheck_alt_cases.py), one process each
  for c in ns2 ns1 ns3 fu2 fu1 fu3 fue; do
    in_final timeout 240 $CS --tool racecheck python3 profiles/racecheck_alt_cases.py $c > $KD/race_$c.log 2>&1 &
  done
  wait
  for c in ns2 ns1 ns3 fu2 fu1 fu3 fue; do
    log "race $c: $(grep -E '^(ok|BAD) ' $KD/race_$c.log | cut -c1-40) $(grep -E 'RACECHECK SUMMARY' $KD/race_$c.log)"
  done
  log "emulation gpu tests: $(tail -n 1 $KD/emulation_gpu.log)"
  log "beside: $(tail -n 1 $KD/beside.log)"
  log "ALL DONE"
fi
