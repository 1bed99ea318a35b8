#!/usr/bin/env bash
# Wait up to $1 s for s17_chain.sh to finish (or for $2, a progress substring), then copy
# /root/keep into $OUT and print the progress.
set -u
end=$(( $(date +%s) + ${1:-500} ))
while [ $(date +%s) -lt $end ]; do
  grep -q "${2:-ALL DONE}" /root/keep/progress.txt 2>/dev/null && break
  sleep 5
done
cp -r /root/keep/. $OUT/ 2>/dev/null
cat /root/keep/progress.txt 2>/dev/null; tail -n 3 /root/keep/chain.log
for f in /root/keep/3_gpu_*.log; do echo "== $f"; grep -E "^FAILED|^ERROR|passed|failed" $f | tail -n 5; done
