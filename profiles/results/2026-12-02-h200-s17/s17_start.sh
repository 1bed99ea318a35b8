#!/usr/bin/env bash
# Start s17_chain.sh detached (setsid), so that it outlives the call; poll with s17_poll.sh.
set -u
rm -rf /root/keep; mkdir -p /root/keep
setsid nohup bash profiles/results/2026-12-02-h200-s17/s17_chain.sh > /root/keep/chain.log 2>&1 < /dev/null &
sleep 3; echo started; nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv
