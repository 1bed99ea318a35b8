#!/usr/bin/env bash
# Session 34's extra GPU steps for wip_session.sh (DSL env sourced; run from the chain's root).
#   bash profiles/s34_steps.sh sweep    split_breakdown --sweep in main and in /root/wip_final
#   bash profiles/s34_steps.sh sanitize memcheck + racecheck of the fused variants, and
#                                       racecheck_alt_cases.py, in /root/wip_final
set -u
source "$(dirname "$0")/tree_cache.sh"
CASES="MTP q=4 B=1,decode B=8"
case $1 in
  sweep)
    for t in /root/wip_final .; do
      echo "== $t"
      ( cd $t && PYTHONPATH=python:. FA512_CACHE_DIR=$(cache_of $t) timeout 240 \
          python3 profiles/split_breakdown.py --quick --case "$CASES" --sweep 8,16,112,128,132 )
      echo "rc=$?"
    done ;;
  sanitize)
    cd /root/wip_final && export PYTHONPATH=python:. FA512_CACHE_DIR=$(cache_of .)
    timeout 500 python3 -m fa512 sanitize --tools memcheck,racecheck --only=fused --jobs 8; echo "sanitize rc=$?"
    CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for c in fu1 fu2 fu3 fue; do  # fused split CTAs of 2 pieces each: the two scratch buffers
      echo "== racecheck $c"; timeout 200 $CS --tool racecheck python3 profiles/racecheck_alt_cases.py $c 2>&1 | tail -n 3
    done ;;
  *) echo "usage: $0 sweep | sanitize"; exit 2 ;;
esac
