#!/usr/bin/env python3
"""What a second core gives Freshet and DuckDB on the same Parquet file, run on demand.

    pip install duckdb
    cargo build --release
    ./target/release/freshet gen market_data --records 10M --out /tmp/fb/market_data_10M.parquet
    python3 bench/duckdb_scaling.py /tmp/fb/market_data_10M.parquet 5 [S1,S2,S3a,S3b]

For each scenario, each round runs `freshet query` (a new process, start-up included, output to
`null`) at one and two streams and DuckDB (in this process, `SET threads`) at one and two
threads over the same file, in turns. Reported per scenario, as medians over the rounds:
wall-clock seconds, CPU seconds (user + system: Freshet's from `getrusage` of the finished
child, DuckDB's from this process's own), the speed-up of two over one, the CPU at two
over the CPU at one, the cores one stream or thread keeps busy (its CPU over its wall
time), and the most that the machine's cores could give over that (cores over busy cores),
which no second stream or thread can exceed. DuckDB's queries compute the same rows as Freshet's and sum every output column (so that no
column is optimized away): S3a's windows are
`time_bucket` groups; S3b's changelog is a window COUNT and AVG per (trader, symbol, minute)
in file order (`file_row_number` breaks ties), materialized and counted. Not part of the build or the
tests: Python packages are for comparison scripts only.
"""
import os, resource, statistics, subprocess, sys, time
import duckdb

FRESHET = os.environ.get("FRESHET", os.path.join(os.path.dirname(__file__), "..", "target", "release", "freshet"))

from scenario_sql import FRESHET_SQL

DUCKDB_SQL = {
    "S1": "SELECT count(*), sum(prev_price), sum(seq_num), sum(moving_avg) FROM (SELECT symbol, price, LAG(price, 1) OVER w AS prev_price, ROW_NUMBER() OVER w AS seq_num, "
          "AVG(price) OVER (PARTITION BY symbol ORDER BY trade_time, file_row_number ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS moving_avg "
          "FROM read_parquet('{path}', file_row_number = true) WINDOW w AS (PARTITION BY symbol ORDER BY trade_time, file_row_number))",
    "S2": "SELECT count(*), sum(n), sum(a), sum(lo), sum(hi), sum(q) FROM (SELECT symbol, COUNT(*) AS n, AVG(price) AS a, "
          "MIN(price) AS lo, MAX(price) AS hi, SUM(quantity) AS q FROM read_parquet('{path}') GROUP BY symbol)",
    "S3a": "SELECT count(*), sum(n), sum(a), sum(q) FROM (SELECT trader_id, symbol, time_bucket(INTERVAL '1 minute', trade_time) AS w, "
           "COUNT(*) AS n, AVG(price) AS a, SUM(quantity) AS q FROM read_parquet('{path}') GROUP BY trader_id, symbol, w)",
    "S3b": "SELECT count(*), sum(trade_count), sum(avg_price) FROM (SELECT trader_id, symbol, COUNT(*) OVER c AS trade_count, AVG(price) OVER c AS avg_price "
           "FROM read_parquet('{path}', file_row_number = true) WINDOW c AS (PARTITION BY trader_id, symbol, time_bucket(INTERVAL '1 minute', trade_time) "
           "ORDER BY file_row_number ROWS UNBOUNDED PRECEDING))",
}


def cpu_of(usage):
    return usage.ru_utime + usage.ru_stime


def run_freshet(sql, path, streams):
    cmd = [FRESHET, "query", sql, "--table", f"market_data={path},event_time=trade_time",
           "--partitions", str(streams), "-o", "null"]
    before = cpu_of(resource.getrusage(resource.RUSAGE_CHILDREN))
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - start
    return wall, cpu_of(resource.getrusage(resource.RUSAGE_CHILDREN)) - before


def run_duckdb(con, sql, threads):
    con.execute(f"SET threads = {threads}")
    before = cpu_of(resource.getrusage(resource.RUSAGE_SELF))
    start = time.perf_counter()
    con.execute(sql).fetchall()
    wall = time.perf_counter() - start
    return wall, cpu_of(resource.getrusage(resource.RUSAGE_SELF)) - before


def main():
    path, rounds = sys.argv[1], int(sys.argv[2])
    scenarios = sys.argv[3].split(",") if len(sys.argv) > 3 else list(DUCKDB_SQL)
    con = duckdb.connect()
    cores = os.cpu_count() or 1
    print("| scenario | engine | wall s at 1 / 2 | speed-up of 2 over 1 | CPU s at 1 / 2 | CPU at 2 over 1 "
          f"| cores busy at 1 | most {cores} cores give |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for scenario in scenarios:
        runs = {key: [] for key in [("Freshet", 1), ("Freshet", 2), ("DuckDB", 1), ("DuckDB", 2)]}
        duck_sql = DUCKDB_SQL[scenario].format(path=path)
        run_duckdb(con, duck_sql, 2)  # warm the file cache and DuckDB's metadata
        for _ in range(rounds):
            for n in (1, 2):
                runs[("Freshet", n)].append(run_freshet(FRESHET_SQL[scenario], path, n))
                runs[("DuckDB", n)].append(run_duckdb(con, duck_sql, n))
        for engine in ("Freshet", "DuckDB"):
            wall = [statistics.median(w for w, _ in runs[(engine, n)]) for n in (1, 2)]
            cpu = [statistics.median(c for _, c in runs[(engine, n)]) for n in (1, 2)]
            busy = cpu[0] / wall[0]
            print(f"| {scenario} | {engine} | {wall[0]:.2f} / {wall[1]:.2f} | {wall[0] / wall[1]:.2f}x | "
                  f"{cpu[0]:.2f} / {cpu[1]:.2f} | {cpu[1] / cpu[0]:.2f}x | {busy:.2f} | {cores / busy:.2f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
