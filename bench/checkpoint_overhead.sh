#!/bin/bash
# Throughput and CPU of S3a and S3b over a Parquet file, without checkpoints and with
# checkpoints every 10 s and every 1 s, alternated, three rounds, at 1 and 2 streams.
#
#   bench/checkpoint_overhead.sh FILE [FRESHET]
#
# FILE: a market_data Parquet file (freshet gen market_data --records 100M --out FILE).
# Each line: scenario, streams, mode, then wall, user and system seconds, and for
# checkpointed runs the checkpoints taken and the largest state (from the run's summary).
set -euo pipefail
FILE=$1
FRESHET=${2:-target/release/freshet}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TIMEFORMAT="%R %U %S"
S3A="SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, SUM(quantity) AS total_quantity FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)"
S3B="SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES"
for name in S3A S3B; do
  sql=${!name}
  for streams in 1 2; do
    for round in 1 2 3; do
      for mode in plain 10s 1s; do
        rm -rf "$WORK/out" "$WORK/out.parquet" "$WORK/checkpoints"
        if [ "$mode" == plain ]; then
          times=$( { time "$FRESHET" query "$sql" --table "market_data=$FILE" --partitions "$streams" \
            --strategy hash -o "parquet=$WORK/out.parquet" >/dev/null 2>&1; } 2>&1 )
          echo "$name streams=$streams $mode $times"
        else
          times=$( { time "$FRESHET" query "$sql" --table "market_data=$FILE" --partitions "$streams" \
            -o "parquet=$WORK/out" --checkpoint-dir "$WORK/checkpoints" \
            --checkpoint-interval "$mode" >/dev/null 2>"$WORK/summary"; } 2>&1 )
          echo "$name streams=$streams $mode $times $(grep -o '[0-9]* checkpoints (largest [0-9]* bytes' "$WORK/summary")"
        fi
      done
    done
  done
done
