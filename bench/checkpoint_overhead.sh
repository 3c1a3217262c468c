#!/bin/bash
# Throughput and CPU of S1, S3a, S3b and J1 over a Parquet file, without checkpoints
# (`plain`: one Parquet file), with a checkpoint directory whose interval never comes
# (`never`: the same part-file sink, one checkpoint at the end) and with checkpoints every
# 10 s and every 1 s, alternated, three rounds, at 1 and 2 streams. The checkpoints' cost is
# `10s` against `never`.
#
#   [MODES="plain never 10s 1s"] bench/checkpoint_overhead.sh FILE [FRESHET] [SCENARIOS]
#
# FILE: a market_data Parquet file (freshet gen market_data --records 100M --out FILE).
# Each line: scenario, streams, mode, then wall, user and system seconds, and for
# checkpointed runs the checkpoints taken and the largest state (from the run's summary).
set -euo pipefail
FILE=$1
FRESHET=${2:-target/release/freshet}
SCENARIOS=${3:-"S1 S3A S3B J1"}
MODES=${MODES:-"plain never 10s 1s"}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TIMEFORMAT="%R %U %S"
S3A="SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price, SUM(quantity) AS total_quantity FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE)"
S3B="SELECT trader_id, symbol, COUNT(*) AS trade_count, AVG(price) AS avg_price FROM market_data GROUP BY trader_id, symbol WINDOW TUMBLING (trade_time, INTERVAL '1' MINUTE) EMIT CHANGES"
S1="SELECT symbol, price, LAG(price, 1) OVER (PARTITION BY symbol ORDER BY trade_time) AS prev_price, ROW_NUMBER() OVER (PARTITION BY symbol ORDER BY trade_time) AS seq_num, AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS moving_avg FROM market_data"
J1="SELECT a.symbol, a.trade_time, a.price, b.price AS prior_price FROM market_data a JOIN market_data b ON a.symbol = b.symbol AND b.trade_time BETWEEN a.trade_time - INTERVAL '1' SECOND AND a.trade_time"
for name in $SCENARIOS; do
  sql=${!name}
  for streams in 1 2; do
    for round in 1 2 3; do
      for mode in $MODES; do
        rm -rf "$WORK/out" "$WORK/out.parquet" "$WORK/checkpoints"
        if [ "$mode" == plain ]; then
          times=$( { time "$FRESHET" query "$sql" --table "market_data=$FILE,event_time=trade_time" --partitions "$streams" \
            --strategy hash -o "parquet=$WORK/out.parquet" >/dev/null 2>&1; } 2>&1 )
          echo "$name streams=$streams $mode $times"
        else
          interval=$mode
          [ "$mode" == never ] && interval=1000000s
          times=$( { time "$FRESHET" query "$sql" --table "market_data=$FILE,event_time=trade_time" --partitions "$streams" \
            -o "parquet=$WORK/out" --checkpoint-dir "$WORK/checkpoints" \
            --checkpoint-interval "$interval" >/dev/null 2>"$WORK/summary"; } 2>&1 )
          echo "$name streams=$streams $mode $times $(grep -o '[0-9]* checkpoints (largest [0-9]* bytes' "$WORK/summary")"
        fi
      done
    done
  done
done
