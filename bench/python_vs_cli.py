#!/usr/bin/env python3
"""Freshet from Python against the `freshet` command on the same Parquet file, run on demand.

    pip install ./bindings/python          # a release build of the package
    cargo build --release
    ./target/release/freshet gen market_data --records 10M --out /tmp/fb/market_data_10M.parquet
    python3 bench/python_vs_cli.py /tmp/fb/market_data_10M.parquet 5 [S3a,S1,...] [PARTITIONS]

Each round runs, in turns, `freshet query SQL --table market_data=FILE,event_time=trade_time
-o null` (a new process, start-up included) and the same query from Python in a new process
(`python -c`) that iterates the results as `pyarrow.RecordBatch`es and counts their rows.
Both give the same row count (checked). Reported per scenario, as medians over the rounds:
wall-clock seconds of each process, Python's over the command line's, and the time inside
Python from creating the context to the last batch (the interpreter's start and the imports
of pyarrow and freshet left out) over the command line's whole process, and the CPU time
(user + system, `getrusage` of each finished child) per input record of both processes. A second part registers a pyarrow table of 10 M rows
(`register_stream`) and reports how much the process grew (resident memory): the buffers are
not copied. Not part of the build or the tests.
"""
import os
import resource
import statistics
import subprocess
import sys
import time

FRESHET = os.environ.get(
    "FRESHET", os.path.join(os.path.dirname(__file__), "..", "target", "release", "freshet")
)

from scenario_sql import FRESHET_SQL as SQL

PYTHON_RUN = """
import sys, time, freshet
path, sql, partitions = sys.argv[1], sys.argv[2], sys.argv[3]
started = time.monotonic()
ctx = freshet.StreamingContext(partitions=int(partitions) if partitions != "auto" else None)
ctx.register_parquet("market_data", path, event_time="trade_time")
rows = 0
for batch in ctx.sql(sql):
    rows += batch.num_rows
print(rows, time.monotonic() - started)
"""

ZERO_COPY = """
import numpy, pyarrow as pa, freshet
def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096
rows = 10_000_000
table = pa.table({"v": numpy.arange(rows, dtype=numpy.int64), "w": numpy.ones(rows)})
ctx = freshet.StreamingContext()
before = resident()
ctx.register_stream("t", table)
print(table.nbytes, resident() - before)
"""


def timed(command):
    """Wall seconds, CPU seconds (user + system of the finished child) and the output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out


def main():
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    scenarios = sys.argv[3].split(",") if len(sys.argv) > 3 else ["S3a"]
    partitions = sys.argv[4] if len(sys.argv) > 4 else "auto"
    print(f"{path}, {rounds} rounds, streams: {partitions}")
    print("| scenario | freshet query (s) | Python process (s) | Python / CLI | Python, the query alone (s) | the query alone / CLI | CPU ns a record, CLI / Python process |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for scenario in scenarios:
        sql = SQL[scenario]
        cli_args = [FRESHET, "query", sql, "--table", f"market_data={path},event_time=trade_time", "-o", "null"]
        if partitions != "auto":
            cli_args += ["--partitions", partitions]
        cli, python, ratios, inside, inside_ratios, cli_cpu, py_cpu = [], [], [], [], [], [], []
        for _ in range(rounds):
            cli_time, cli_seconds, cli_out = timed(cli_args)
            py_time, py_seconds, py_out = timed([sys.executable, "-c", PYTHON_RUN, path, sql, partitions])
            records = int(cli_out.stderr.strip().split("records read")[0].split()[-1])
            cli_cpu.append(cli_seconds * 1e9 / records)
            py_cpu.append(py_seconds * 1e9 / records)
            cli_rows = int(cli_out.stderr.strip().split()[0])
            py_rows, query_time = py_out.stdout.split()
            assert cli_rows == int(py_rows), (cli_rows, py_rows)
            cli.append(cli_time)
            python.append(py_time)
            ratios.append(py_time / cli_time)
            inside.append(float(query_time))
            inside_ratios.append(float(query_time) / cli_time)
        print(
            f"| {scenario} | {statistics.median(cli):.2f} | {statistics.median(python):.2f} | "
            f"{statistics.median(ratios):.2f}x | {statistics.median(inside):.2f} | "
            f"{statistics.median(inside_ratios):.2f}x | {statistics.median(cli_cpu):.0f} / "
            f"{statistics.median(py_cpu):.0f} |"
        )
    if os.path.exists("/proc/self/statm"):
        out = subprocess.run([sys.executable, "-c", ZERO_COPY], check=True, capture_output=True, text=True)
        table_bytes, grown = map(int, out.stdout.split())
        print(f"\nregister_stream of a 10 M-row table ({table_bytes / 1e6:.0f} MB): the process grew {grown / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
