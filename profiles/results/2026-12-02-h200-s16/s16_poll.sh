#!/usr/bin/env bash
# Poll the background jobs of s16_a.sh: wait up to $1 s for them, then copy their logs into $OUT.
set -u
end=$(( $(date +%s) + ${1:-500} ))
while [ $(date +%s) -lt $end ]; do
  done_n=0
  for f in 3_gpu_B 3_gpu_A 4_sanitize; do grep -q "^rc=" /root/keep/$f.log 2>/dev/null && done_n=$((done_n+1)); done
  [ $done_n -eq 3 ] && break
  sleep 10
done
cp /root/keep/*.log $OUT/ 2>/dev/null
for f in /root/keep/*.log; do echo "== $f"; tail -n 4 $f; grep -E "^FAILED|^ERROR" $f | head; done
