#!/usr/bin/env bash
# Session 30's GPU chain for the decode_alt patch (temporary; DSL env sourced, repository root =
# main): racecheck with the merge's new barrier id, the two-stream fault taken apart, and the
# three-stage graph crash case by case. Logs in /root/keep; `poll` is wip_probe.sh's.
#   bash profiles/s30_probe.sh start && bash profiles/s30_probe.sh poll 540
# (as run in session 30, from profiles/; kept here with its logs)
set -u
KD=/root/keep
# poll: wip_probe.sh's (same /root/keep, same "ALL DONE" line)
[ "${1:-}" = poll ] && exec bash profiles/wip_probe.sh poll "${2:-500}"
if [ "${1:-}" = start ]; then
  rm -rf $KD && mkdir -p $KD
  ( setsid nohup bash profiles/s30_probe.sh chain > $KD/chain.log 2>&1 < /dev/null & )
  sleep 1; echo started; exit 0
fi
export PYTHONPATH=python:.:${PYTHONPATH:-}
t0=$(date +%s)
log() { echo "$(( $(date +%s) - t0 ))s $*" >> $KD/progress.txt; }
M=$PWD
OUT=$KD bash profiles/wip_trees.sh build decode_alt >> $KD/progress.txt 2>&1
T=/root/wip_decode_alt
# 1. the two-stream case: three stages, two stages, main, side by side
( cd $T && FA512_CACHE_DIR=/root/c3 timeout 200 python3 -X faulthandler profiles/decode_alt_probe.py streams > $KD/streams_s3.log 2>&1; echo "rc=$?" >> $KD/streams_s3.log ) &
( cd $T && FA512_ALT_STAGES=2 FA512_CACHE_DIR=/root/c2 timeout 200 python3 -X faulthandler profiles/decode_alt_probe.py streams > $KD/streams_s2.log 2>&1; echo "rc=$?" >> $KD/streams_s2.log ) &
( cd $M && FA512_CACHE_DIR=/root/cm timeout 200 python3 -X faulthandler profiles/decode_alt_probe.py streams > $KD/streams_main.log 2>&1; echo "rc=$?" >> $KD/streams_main.log ) &
wait
log "streams: s3 $(tail -n 2 $KD/streams_s3.log | tr '\n' ' ') | s2 $(tail -n 2 $KD/streams_s2.log | tr '\n' ' ') | main $(tail -n 2 $KD/streams_main.log | tr '\n' ' ')"
# 2. the graph crash: one latency case per process, three stages, then B=1 at two stages
for c in "k=8k 32/4" "MTP q=4 B=1" "decode B=8" "floor"; do
  ( cd $T && FA512_CACHE_DIR=/root/c3 timeout 120 python3 -X faulthandler profiles/decode_alt_probe.py graph "$c" > "$KD/graph_s3_${c//[ \/=]/_}.log" 2>&1 )
  log "graph s3 '$c' rc=$? $(tail -n 1 "$KD/graph_s3_${c//[ \/=]/_}.log" | cut -c1-200)"
done
( cd $T && FA512_ALT_STAGES=2 FA512_CACHE_DIR=/root/c2 timeout 120 python3 -X faulthandler profiles/decode_alt_probe.py graph "k=8k 32/4" > $KD/graph_s2_b1.log 2>&1 )
log "graph s2 b1 rc=$? $(tail -n 1 $KD/graph_s2_b1.log | cut -c1-200)"
# 3. memcheck + racecheck, every decode_alt variant
( cd $T && FA512_CACHE_DIR=/root/c3 timeout 300 python3 -m fa512 sanitize --tools memcheck,racecheck --only=decode_alt --jobs 8 > $KD/sanitize.log 2>&1 )
log "sanitize rc=$? $(tail -n 3 $KD/sanitize.log | tr '\n' ' ' | cut -c1-300)"
log "ALL DONE"
