#!/usr/bin/env bash
# One GPU session's work on the profiles/wip patches, as a detached chain that outlives the
# device call (DSL env sourced, repository root = main). Logs in /root/keep, one line per step
# in /root/keep/progress.txt; poll with `bash profiles/wip_session.sh poll [SECONDS] [UNTIL]`
# (it leaves /root/keep as $OUT/keep.tgz).
#   PATCHES="a b" [FINAL="a b"] [AB="a final"] [AB_PREFILL="b final"] [FUZZ=1|NAME] [FIRST="cmd"] \
#     [BESIDE="cmd"] [EXTRA="cmd; cmd"] bash profiles/wip_session.sh start
# The chain runs in a snapshot of the repository root taken at start ($SNAP), with its own
# compile cache. Steps, in order:
#   1. build a tree per patch (profiles/wip_trees.sh) and, with FINAL, one tree "final" of main
#      plus the FINAL patches (the suite of main as it would be with them landed); fill every
#      compile cache in parallel; then FIRST (shell commands on main, with main's compile cache:
#      what must not wait);
#   2. FUZZ=1: `fa512 fuzz --cases 500 --kernel triton` in the last tree whose name starts with
#      "triton" (else in main); FUZZ=NAME: in that tree ("final", a patch's, or "main"). First
#      thing on the quiet GPU, so Triton's cache is cold;
#   3. the GPU suite's kernel half in every tree at once; beside them, final's tools half (so
#      final gets the whole suite without a second long wait: 500-660 s alone) and BESIDE
#      (shell commands on main: correctness work that a busy GPU only slows, e.g. sanitize);
#   4. for each name in AB whose kernel half passed (a patch's tree, or "final"): `ab_trees.sh`
#      against main, rounds AB_ROUNDS (default "new base base new"; latency + decode --quick), the GPU quiet;
#      the same for each name in AB_PREFILL with MODE=prefill (bench --modes prefill,chunked);
#   5. EXTRA (shell commands on main, as FIRST);
#   6. without FINAL, the tools half in each AB tree that passed, one at a time.
set -u
KD=/root/keep
SNAP=/root/chain_main  # the tree the chain runs in ("main" below; its cache /root/cache_chain_main)
source "$(dirname "$0")/tree_cache.sh"
if [ "${1:-}" = poll ]; then
  end=$(( $(date +%s) + ${2:-500} ))
  while [ "$(date +%s)" -lt $end ]; do
    grep -q "${3:-ALL DONE}" $KD/progress.txt 2>/dev/null && break
    pgrep -f "[w]ip_session.sh chain" > /dev/null || { echo "no chain running"; break; }
    sleep 5
  done
  # one tarball: the device tool returns at most 8 files of $OUT (session 18 lost its logs to that)
  mkdir -p "${OUT:-out}" && tar czf "${OUT:-out}/keep.tgz" -C $KD . 2>/dev/null
  cat $KD/progress.txt 2>/dev/null
  exit 0
fi
if [ "${1:-}" = start ]; then
  if pgrep -f "[w]ip_session.sh chain" > /dev/null; then echo "a chain is still running: poll it"; exit 1; fi
  rm -rf $KD && mkdir -p $KD
  # The chain runs in a snapshot of this tree: every device call re-copies the working tree into
  # the repository root, and a compile reading a file as it is replaced fails (session 18's fill
  # of main: "the source of store_tile is not available", while a poll call had started).
  rm -rf $SNAP && mkdir -p $SNAP
  tar --exclude=./.device --exclude=./profiles/results -cf - . | tar -xf - -C $SNAP
  ( cd $SNAP && PATCHES=${PATCHES:-} AB=${AB:-} AB_PREFILL=${AB_PREFILL:-} FINAL=${FINAL:-} FUZZ=${FUZZ:-0} FIRST=${FIRST:-} \
      BESIDE=${BESIDE:-} EXTRA=${EXTRA:-} setsid nohup bash profiles/wip_session.sh chain > $KD/chain.log 2>&1 < /dev/null & )
  sleep 2
  pgrep -f "[w]ip_session.sh chain" > /dev/null || grep -q "ALL DONE" $KD/progress.txt 2>/dev/null || \
    { echo "the chain did not start: $KD/chain.log"; exit 1; }
  echo "started: PATCHES='${PATCHES:-}' AB='${AB:-}' AB_PREFILL='${AB_PREFILL:-}' FINAL='${FINAL:-}' FUZZ=${FUZZ:-0}"; exit 0
fi
[ "${1:-}" = chain ] || { echo "usage: $0 start | poll [SECONDS] [UNTIL]"; exit 2; }
export OUT=$KD PYTHONPATH=python:.:${PYTHONPATH:-}
t0=$(date +%s)
log() { echo "$(( $(date +%s) - t0 ))s $*" >> $KD/progress.txt; }
bash profiles/wip_trees.sh build $PATCHES >> $KD/progress.txt 2>&1
trees=$(for p in $PATCHES; do [ -e /root/wip_$p/BUILD_FAILED ] || echo $p; done)  # the patches that applied
final=""
if [ -n "$FINAL" ]; then
  bash profiles/wip_trees.sh build_set final $FINAL >> $KD/progress.txt 2>&1
  [ -e /root/wip_final/BUILD_FAILED ] || final=final
fi
bash profiles/wip_trees.sh fill $trees $final >> $KD/progress.txt 2>&1
log "filled"
run_main() {  # name commands: shell commands from the repository root, on main's compile cache
  FA512_CACHE_DIR=$(cache_of .) bash -c "$2" > $KD/$1.log 2>&1
  log "$1 rc=$?"
}
[ -n "$FIRST" ] && run_main first "$FIRST"
if [ -n "$FUZZ" ] && [ "$FUZZ" != 0 ]; then
  where=$FUZZ
  if [ "$FUZZ" = 1 ]; then
    where=main
    for p in $trees; do case $p in triton*) where=$p ;; esac; done
  fi
  dir=$( [ $where = main ] && echo . || echo /root/wip_$where )
  s=$(date +%s)
  ( cd $dir && timeout 400 python3 -m fa512 fuzz --cases 500 --kernel triton > $KD/fuzz_triton_$where.log 2>&1 )
  log "fuzz triton in $where rc=$? $(( $(date +%s) - s ))s: $(grep -E 'warm in|cases on' $KD/fuzz_triton_$where.log | tr '\n' ' ')"
fi
beside=()
if [ -n "$final" ]; then
  bash profiles/wip_trees.sh tools final >> $KD/progress.txt 2>&1 &
  beside+=($!)
fi
if [ -n "$BESIDE" ]; then
  run_main beside "$BESIDE" &
  beside+=($!)
fi
[ -n "$trees$final" ] && bash profiles/wip_trees.sh kernels $trees $final >> $KD/progress.txt 2>&1  # final's too
log "kernel halves done"
[ ${#beside[@]} -gt 0 ] && wait "${beside[@]}"
[ -n "$final" ] && log "final suite done (main + $FINAL: kernel and tools halves)"
[ ${#beside[@]} -gt 0 ] && log "beside done"
passed=""
ab_one() {  # NAME MODE
  local p=$1 mode=$2 summary
  case " $(echo $trees $final) " in *" $p "*) ;; *) log "ab $p skipped: its tree did not build"; return ;; esac
  summary=$(grep -E "[0-9]+ (passed|failed)" $KD/kernels_$p.log 2>/dev/null | tail -n 1)
  if echo "$summary" | grep -q passed && ! echo "$summary" | grep -qE "failed|error"; then
    passed="$passed $p"
    MODE=$mode FILL=0 OUT=$KD/ab_${p}_$mode bash profiles/ab_trees.sh /root/wip_$p . ${AB_ROUNDS:-new base base new} >> $KD/progress.txt 2>&1
    log "ab $p $mode done"
  else
    log "ab $p $mode skipped: its kernel half did not pass"
  fi
}
for p in $AB; do ab_one $p latency; done
for p in $AB_PREFILL; do ab_one $p prefill; done
[ -n "$EXTRA" ] && run_main extra "$EXTRA"
if [ -z "$final" ]; then
  passed=$(printf '%s\n' $passed | sort -u)  # a patch in AB and in AB_PREFILL passed twice
  [ -n "$passed" ] && bash profiles/wip_trees.sh tools $passed >> $KD/progress.txt 2>&1
fi
log "ALL DONE"
