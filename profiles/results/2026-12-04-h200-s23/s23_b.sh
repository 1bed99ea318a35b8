#!/usr/bin/env bash
# Session 23's second machine start (DSL env sourced, repository root): the transformers runs of
# issue 25 on the quiet GPU, then the rebased forward_pdl patch's latency A/B against main.
# Detached: `setsid nohup bash <this> &`; progress in /root/keep/progress.txt.
set -u
KD=/root/keep; rm -rf $KD; mkdir -p $KD
t0=$(date +%s)
log() { echo "$(( $(date +%s) - t0 ))s $*" >> $KD/progress.txt; }
SNAP=/root/chain_main; rm -rf $SNAP; mkdir -p $SNAP
tar --exclude=./.device --exclude=./profiles/results -cf - . | tar -xf - -C $SNAP
cd $SNAP
export PYTHONPATH=python:.:${PYTHONPATH:-} OUT=$KD
source profiles/tree_cache.sh
bash profiles/wip_trees.sh build forward_pdl >> $KD/progress.txt 2>&1
bash profiles/wip_trees.sh fill forward_pdl >> $KD/progress.txt 2>&1
log "filled"
hf() { local name=$1; shift
  FA512_CACHE_DIR=$(cache_of .) timeout 240 python3 profiles/transformers_gemma4.py "$@" > $KD/$name.log 2>&1
  log "$name rc=$? $(grep -E 'rel L2' $KD/$name.log | tail -n 1)"; }
hf hf_4k --prompt-len 4096 --new-tokens 32
hf hf_32k --prompt-len 32768 --new-tokens 8
hf hf_pad --prompt-len 4096 --batch 4 --pad 1000 --new-tokens 16
MODE=latency FILL=0 OUT=$KD/ab_forward_pdl_latency bash profiles/ab_trees.sh /root/wip_forward_pdl . new base base new >> $KD/progress.txt 2>&1
log "ab forward_pdl latency done"
log "ALL DONE"
