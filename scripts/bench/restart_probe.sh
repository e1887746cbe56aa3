#!/bin/sh
# A worker for the restart-latency benchmark. Attempt 0: rank 0 records the time (ns) and fails, the
# others block until the agent stops them. Attempt 1: every rank records when it started running.
# Usage: restart_probe.sh DIR
dir=$1
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  if [ "$RANK" = 0 ]; then
    date +%s%N > "$dir/fail"
    exit 1
  fi
  exec sleep 60
fi
date +%s%N > "$dir/start.$RANK"
