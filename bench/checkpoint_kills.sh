#!/bin/bash
# Kills a checkpointed query with SIGKILL at random moments, runs it to the end, and compares
# its committed output with an uninterrupted run's (sorted rows, by MD5).
#
#   bench/checkpoint_kills.sh NAME "SQL" STREAMS KILLS --table NAME=SOURCE [--table …]
#
# Each run is killed at a random moment after it starts, between 10 ms and a twelfth of the
# uninterrupted run's wall time (so that KILLS kills fall inside the run however fast it is;
# a run that finishes first counts no kill), up to KILLS kills in at most 3 × KILLS runs;
# checkpoints every 300 000 records. Prints one line: NAME, streams, kills, rows, and SAME
# or DIFF. FRESHET overrides the binary
# (target/release/freshet). Example, S1 over a 10 M-record file:
#
#   bench/checkpoint_kills.sh S1 "<S1>" 2 20 --table market_data=md.parquet,event_time=trade_time
set -euo pipefail
NAME=$1
SQL=$2
STREAMS=$3
KILLS=$4
shift 4
TABLES=("$@")
FRESHET=${FRESHET:-target/release/freshet}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
started=$(date +%s%N)
"$FRESHET" query "$SQL" "${TABLES[@]}" --partitions "$STREAMS" --strategy hash \
  -o "parquet=$WORK/reference.parquet" 2>/dev/null
window_ms=$(( ($(date +%s%N) - started) / 12000000 ))
[ "$window_ms" -ge 1 ] || window_ms=1
CHECKPOINTED=(query "$SQL" "${TABLES[@]}" --partitions "$STREAMS" -o "parquet=$WORK/out"
  --checkpoint-dir "$WORK/checkpoints" --checkpoint-interval 300k)
killed=0
tries=0
while [ "$killed" -lt "$KILLS" ] && [ "$tries" -lt $((KILLS * 3)) ]; do
  tries=$((tries + 1))
  "$FRESHET" "${CHECKPOINTED[@]}" >/dev/null 2>&1 &
  pid=$!
  delay_ms=$(( 10 + (RANDOM * 32768 + RANDOM) % window_ms ))
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  if kill -9 "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null || true
    killed=$((killed + 1))
  else
    wait "$pid"
  fi
done
"$FRESHET" "${CHECKPOINTED[@]}" >/dev/null 2>&1 || { echo "$NAME: the last run failed"; exit 1; }
digest() {
  "$FRESHET" query "SELECT * FROM o" --table "o=$1" -o csv 2>/dev/null | sort | md5sum | cut -c1-12
}
rows=$("$FRESHET" query "SELECT COUNT(*) FROM o" --table "o=$WORK/reference.parquet" -o csv 2>/dev/null | tail -1)
if [ "$(digest "$WORK/out")" == "$(digest "$WORK/reference.parquet")" ]; then
  verdict=SAME
else
  verdict=DIFF
fi
echo "$NAME streams=$STREAMS killed=$killed rows=$rows $verdict"
[ "$verdict" == SAME ]
