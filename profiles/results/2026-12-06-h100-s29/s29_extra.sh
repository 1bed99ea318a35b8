timeout 200 python3 profiles/decode_alt_debug.py plain p16 l > /root/keep/debug_plain.log 2>&1; echo "debug rc=$?" >> /root/keep/progress.txt
FA512_ALT_STAGES=2 FA512_CACHE_DIR=/root/cache_s2 timeout 200 python3 -m fa512 bench --modes latency --no-first-call --kernels fp8_mma --out /tmp/lat_s2 > /root/keep/lat_s2.log 2>&1; cp /tmp/lat_s2/bench.json /root/keep/lat_s2.json; echo "lat s2 rc=$?" >> /root/keep/progress.txt
timeout 300 python3 -m fa512 sanitize --tools memcheck,racecheck --only=decode_alt --jobs 6 > /root/keep/sanitize.log 2>&1; echo "sanitize rc=$?" >> /root/keep/progress.txt
