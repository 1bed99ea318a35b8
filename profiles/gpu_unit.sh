#!/usr/bin/env bash
# One self-contained GPU call (~600 s at most) for the profiles/wip patches, for a machine that
# may be fresh: session 35 lost two machines (and the detached chains on them) to the 30 s idle
# release after calls of ~550 s, so no step here waits on a later call. Run after
# `bash .device/a/recv.sh` (carry .device/a) on a fresh machine, with carry [".device/b"]:
#   [FINAL="a b"] bash profiles/gpu_unit.sh UNIT...
# Every unit first installs the DSL (skipped where installed), builds /root/wip_final (main plus
# the FINAL patches, in order) and, unless FILL=0, fills the caches of main and final (~80 s fresh).
# Units, run in the order given, each under its own timeout (sweep, breakdown and timeline take
# a kernel as UNIT:KERNEL, e.g. sweep:mma16-bf16; default SWEEP_KERNEL or fp8_mma; sweep and
# breakdown also UNIT:KERNEL:FIELDS, split_breakdown.py --config FIELDS, e.g.
# sweep:mma16-bf16:tile_n=32,kv_stages=2; SWEEP_PRECISION=accurate times fp8_mma's accurate mode):
#   kernels   the GPU suite's kernel half in final (wip_trees.sh kernels)
#   pytest    GPU tests in final: PYTEST_FILES (default tests/test_native.py), PYTEST_K (a -k expression)
#   many      tests/test_many_splits.py in final (62 s on an H100)
#   ab        latency A/B, final against main: ab_trees.sh, rounds AB_ROUNDS (new base base new)
#   sweep     split_breakdown --sweep SWEEP_SPLITS in final and in main, the SWEEP_CASES, SWEEP_KERNEL
#   breakdown split_breakdown (call, forward alone, unsplit, copy) in final and in main (the same)
#   sweep2    the sweep in final2, final, final2 (FINAL2 set; SWEEP2_SPLITS, fused counts only)
#   timeline  kernel_timeline.py in final, SWEEP_CASES and SWEEP_KERNEL (CTA (0,0,0)'s events, every CTA's record)
#   sanitize  memcheck + racecheck of the fused variants (SANITIZE_ONLY: key substrings, default
#             fused), racecheck_alt_cases.py fu1..fue, in final
#   fuzz      the tools half's fuzz in final: one compile pass (fuzz --prepare-only), then 4 processes at once
#   rest      the tools half's other modules in final
# Logs: $OUT/keep/, one line per step in $OUT/keep/progress.txt; a background loop re-packs
# them into $OUT/keep.tgz every 20 s (the device returns at most 8 files, and a call cut at its
# limit returns what $OUT holds at that moment).
set -u
KD=$OUT/keep; mkdir -p "$KD"; P=$KD/progress.txt; t0=$(date +%s)
log() { echo "$(( $(date +%s) - t0 ))s $*" | tee -a "$P"; }
pack() { tar czf "$OUT/.keep.tgz" -C "$KD" . 2>/dev/null && mv "$OUT/.keep.tgz" "$OUT/keep.tgz"; }
( while sleep 20; do pack; done ) & packer=$!
trap 'kill $packer 2>/dev/null; pack' EXIT
bash .device/b/install.sh > "$KD/install.log" 2>&1 || { log "install failed: $(tail -n 1 "$KD/install.log")"; exit 1; }
log "install: $(tail -n 1 "$KD/install.log")"
source /root/device-env.sh
export PYTHONPATH=python:.:${PYTHONPATH:-}
source profiles/tree_cache.sh
trees() { OUT=$KD bash profiles/wip_trees.sh "$@" >> "$P" 2>&1; }
# a tree is rebuilt when it failed or was built from other patches (FINAL_SET: its list)
stale() { [ ! -d "$1" ] || [ -e "$1/BUILD_FAILED" ] || [ "$(cat "$1/FINAL_SET" 2>/dev/null)" != "$2" ]; }
if stale /root/wip_final "${FINAL:-}"; then trees build_set final ${FINAL:-}; echo "${FINAL:-}" > /root/wip_final/FINAL_SET; fi
[ -e /root/wip_final/BUILD_FAILED ] && { log "final did not build"; exit 1; }
# FINAL2 (patches, in order): a second tree, /root/wip_final2, for the sweep2 unit only; its cache
# holds the fused variants (the sweep2 split counts run no other forward)
if [ -n "${FINAL2:-}" ]; then
  if stale /root/wip_final2 "$FINAL2"; then trees build_set final2 $FINAL2; echo "$FINAL2" > /root/wip_final2/FINAL_SET; fi
  [ "${FILL:-1}" = 1 ] && ( cd /root/wip_final2 && FA512_CACHE_DIR=$(cache_of .) timeout 300 \
      python3 -m fa512 compile --fill-cache --only fused --jobs 4 > "$KD/fill_final2.log" 2>&1 ) & fill2=$!
fi
[ "${FILL:-1}" = 1 ] && { trees fill final; log filled; }
[ -n "${fill2:-}" ] && { wait "$fill2"; log "filled final2 (fused): rc=$? $(tail -n 1 "$KD/fill_final2.log" | cut -c1-100)"; }
in_final() { ( cd /root/wip_final && FA512_CACHE_DIR=$(cache_of .) "$@" ); }
# gpu_tests NAME SECONDS PYTEST_ARGS...: GPU-marked tests in final, logged to $KD/NAME_final.log
gpu_tests() { local name=$1 secs=$2; shift 2
  in_final timeout "$secs" python3 -m pytest -q -m gpu "$@" -rs -p no:cacheprovider > "$KD/${name}_final.log" 2>&1; }
cases=${SWEEP_CASES:-MTP q=4 B=1,decode B=8}
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for unit in "$@"; do
  s=$(date +%s)
  kern=${unit#*:}; [ "$kern" = "$unit" ] && kern=${SWEEP_KERNEL:-fp8_mma}  # sweep:mma16-bf16 etc.
  cfg=${kern#*:}; [ "$cfg" = "$kern" ] && cfg=""; kern=${kern%%:*}  # sweep:KERNEL:tile_n=32,kv_stages=2
  tag=$kern${cfg:+_$(echo "$cfg" | tr ',=' '-_')}${SWEEP_PRECISION:+_$SWEEP_PRECISION}
  case ${unit%%:*} in
    kernels) trees kernels final ;;
    pytest) gpu_tests pytest 240 ${PYTEST_FILES:-tests/test_native.py} ${PYTEST_K:+-k "$PYTEST_K"} ;;
    many) gpu_tests many 200 tests/test_many_splits.py ;;
    ab) K=${K:-fp8_mma,mma16[bf16kv]} FILL=0 OUT=$KD/ab bash profiles/ab_trees.sh /root/wip_final . \
          ${AB_ROUNDS:-new base base new} >> "$P" 2>&1 ;;
    sweep|breakdown|sweep2)
           trees_of_unit="/root/wip_final ."
           [ ${unit%%:*} = sweep2 ] && trees_of_unit="/root/wip_final2 /root/wip_final /root/wip_final2"
           for t in $trees_of_unit; do
             echo "== $t"
             ( cd $t && FA512_CACHE_DIR=$(cache_of .) timeout 240 python3 profiles/split_breakdown.py \
                 --quick --case "$cases" --kernel "$kern" ${cfg:+--config "$cfg"} \
                 ${SWEEP_PRECISION:+--precision "$SWEEP_PRECISION"} \
                 $( [ ${unit%%:*} = sweep ] && echo --sweep "${SWEEP_SPLITS:-8,16,112,128,132}" ) \
                 $( [ ${unit%%:*} = sweep2 ] && echo --sweep "${SWEEP2_SPLITS:-16,32,112,128}" ) )
             echo "rc=$?"
           done > "$KD/${unit%%:*}_$tag.log" 2>&1 ;;
    timeline) in_final timeout 240 python3 profiles/kernel_timeline.py --case "$cases" --runs 9 --kernel "$kern" \
                > "$KD/timeline_$kern.log" 2>&1 ;;
    sanitize) { for only in ${SANITIZE_ONLY:-fused}; do
                  echo "== sanitize --only=$only"
                  in_final timeout 400 python3 -m fa512 sanitize --tools memcheck,racecheck --only="$only" --jobs 8
                  echo "sanitize $only rc=$?"
                done
                for c in fu1 fu2 fu3 fue; do
                  echo "== racecheck $c"
                  in_final timeout 200 "$CS" --tool racecheck python3 profiles/racecheck_alt_cases.py $c 2>&1 | tail -n 3
                done; } > "$KD/sanitize.log" 2>&1 ;;
    fuzz|rest) TOOLS_PART=$unit trees tools final ;;
    *) log "unknown unit $unit"; continue ;;
  esac
  log "$unit rc=$? $(( $(date +%s) - s ))s"
done
log "ALL DONE"
