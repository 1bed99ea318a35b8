#!/usr/bin/env bash
# Copy the background logs (sanitizers, base cache fill) into $OUT, waiting up to WAIT seconds.
t0=$(date +%s)
while [ $(( $(date +%s) - t0 )) -lt ${WAIT:-0} ] && pgrep -f "fa512 sanitize" >/dev/null; do sleep 5; done
cp /root/bg/*.log $OUT/ 2>/dev/null; for f in /root/bg/*.log; do echo "== $f"; tail -n 4 $f; done
