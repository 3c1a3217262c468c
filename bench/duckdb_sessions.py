#!/usr/bin/env python3
"""Session windows that never close, on the user's path: `freshet query` over a market_data
Parquet file against DuckDB's sessionization of the same file (LAG over each trader's times, a
running sum of the breaks, GROUP BY the session) on one thread, in the same run.

    pip install duckdb pyarrow
    cargo build --release
    python3 bench/duckdb_sessions.py [SIZES] [RUNS]      # default: 1M,4M and 5 runs

The files are written once by `freshet gen market_data` into $DIR (default: the system's
temporary directory). Both sides are timed as wall time of the whole query, Freshet's as one
process (start-up included), DuckDB's inside this process, in RUNS rounds that run each side
on each size once; both answers are checked to be the same rows. Prints the median times, the
median over rounds of DuckDB's time over Freshet's, and Freshet's growth from the smallest size
to the largest (median over rounds of the ratio within a round). Not part of the build or the tests:
Python packages are for comparison scripts only.
"""
import os, statistics, subprocess, sys, tempfile, time

import duckdb

FRESHET = os.environ.get("FRESHET", os.path.join(os.path.dirname(__file__), "..", "target", "release", "freshet"))
DIR = os.environ.get("DIR", os.path.join(tempfile.gettempdir(), "freshet-sessions"))
SQL = ("SELECT trader_id, window_start, COUNT(*) AS n FROM market_data "
       "GROUP BY trader_id WINDOW SESSION (trade_time, INTERVAL '1' MINUTE)")
DUCKDB_SQL = """
WITH marked AS (
  SELECT trader_id, trade_time,
    CASE WHEN trade_time - LAG(trade_time) OVER (PARTITION BY trader_id ORDER BY trade_time)
         < INTERVAL '1 minute' THEN 0 ELSE 1 END AS fresh
  FROM read_parquet('{path}')),
numbered AS (
  SELECT *, SUM(fresh) OVER (PARTITION BY trader_id ORDER BY trade_time
    ROWS UNBOUNDED PRECEDING) AS session FROM marked)
SELECT trader_id, MIN(trade_time) AS window_start, COUNT(*) AS n FROM numbered
GROUP BY trader_id, session ORDER BY trader_id, window_start
"""


def records(size):
    size = size.strip().upper()
    factor = {"K": 1_000, "M": 1_000_000}.get(size[-1], 1)
    return int(float(size.rstrip("KM")) * factor)


def market_data(size):
    os.makedirs(DIR, exist_ok=True)
    path = os.path.join(DIR, f"market_data_{records(size)}.parquet")
    if not os.path.exists(path):
        subprocess.run([FRESHET, "gen", "market_data", "--records", size, "--out", path], check=True,
                       stderr=subprocess.DEVNULL)
    return path


def run_freshet(path):
    start = time.perf_counter()
    out = subprocess.run([FRESHET, "query", SQL, "--table", f"market_data={path}", "--partitions", "1",
                          "-o", "csv"], check=True, capture_output=True, text=True).stdout
    elapsed = time.perf_counter() - start
    rows = sorted(tuple(line.split(",")) for line in out.strip().splitlines()[1:])
    return elapsed, rows


def run_duckdb(con, path):
    start = time.perf_counter()
    rows = con.execute(DUCKDB_SQL.format(path=path)).fetchall()
    return time.perf_counter() - start, rows


def main():
    sizes = (sys.argv[1] if len(sys.argv) > 1 else "1M,4M").split(",")
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    con = duckdb.connect()
    con.execute("SET threads = 1")
    paths = [market_data(size) for size in sizes]
    freshet_times = {size: [] for size in sizes}
    duckdb_times = {size: [] for size in sizes}
    for _ in range(runs):
        for size, path in zip(sizes, paths):
            t, ours = run_freshet(path)
            freshet_times[size].append(t)
            t, theirs = run_duckdb(con, path)
            duckdb_times[size].append(t)
            theirs = sorted(theirs, key=lambda r: (r[0], str(r[1])))
            if [(r[0], r[2]) for r in ours] != [(r[0], str(r[2])) for r in theirs]:
                sys.exit(f"{size}: the answers differ: {ours[:3]} … against {theirs[:3]} …")
    print("| records | Freshet (1 stream) | DuckDB (1 thread) | DuckDB / Freshet |")
    print("|---:|---:|---:|---:|")
    for size in sizes:
        f, d = statistics.median(freshet_times[size]), statistics.median(duckdb_times[size])
        ratio = statistics.median(x / y for x, y in zip(duckdb_times[size], freshet_times[size]))
        print(f"| {records(size):,} | {f:.3f} s | {d:.3f} s | {ratio:.1f}x |")
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        growth = statistics.median(y / x for x, y in zip(freshet_times[first], freshet_times[last]))
        print(f"\nFreshet {last} / {first}: {growth:.2f}x the time "
              f"for {records(last) / records(first):.1f}x the records")


if __name__ == "__main__":
    main()
