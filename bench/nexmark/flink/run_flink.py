"""Runs Nexmark queries on Apache Flink (PyFlink, local, parallelism 1) over the CSV files
`freshet gen nexmark --format csv` writes, and prints events per second per query.

    python3 -m venv /tmp/flinkenv && /tmp/flinkenv/bin/pip install apache-flink==2.3.0
    freshet gen nexmark --events 1M --out /tmp/nx1m --format csv
    /tmp/flinkenv/bin/python bench/nexmark/flink/run_flink.py /tmp/nx1m 1000000 q0 q1 q2 q5

The queries are the files `qN.sql` beside this script.

Flink's filesystem CSV source cannot skip a header line and reads timestamps as
`2015-07-15 00:00:00.001`: the files are copied once without their header and with a space
for the ISO `T`. The time counted is the job's, from submission to its end, as a user sees
it, after one unreported job that warms the JVM up; the events are all three streams' (the
sequence the files hold).
"""

import os
import re
import sys
import time

from pyflink.table import EnvironmentSettings, TableEnvironment

SCHEMAS = {
    "person": "id BIGINT, name STRING, email_address STRING, credit_card STRING, city STRING, "
    "state STRING, date_time TIMESTAMP(3), extra STRING",
    "auction": "id BIGINT, item_name STRING, description STRING, initial_bid BIGINT, "
    "reserve BIGINT, date_time TIMESTAMP(3), expires TIMESTAMP(3), seller BIGINT, "
    "category BIGINT, extra STRING",
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
    "date_time TIMESTAMP(3), extra STRING",
}

# The standard queries in Flink's dialect (nexmark/nexmark's nexmark-flink queries, the columns
# in snake case), one file each beside this script; Freshet runs the same files as written.
HERE = os.path.dirname(os.path.abspath(__file__))
QUERIES = {
    name[:-4]: open(os.path.join(HERE, name)).read()
    for name in sorted(os.listdir(HERE))
    if re.fullmatch(r"q\d+\.sql", name)
}
# The queries run without names: those Flink runs here as they are (q14 needs its
# count_char function registered in Flink; q11's group windows are Flink's legacy ones).
DEFAULT = ["q0", "q1", "q2", "q3", "q5", "q8", "q17"]

ISO_T = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d:)")


def headerless_copy(directory, table):
    """`DIR/table.csv` without its header and with SQL timestamps, made once."""
    target = os.path.join(directory, "flink", table)
    os.makedirs(target, exist_ok=True)
    path = os.path.join(target, "part.csv")
    if not os.path.exists(path):
        with open(os.path.join(directory, f"{table}.csv")) as source, open(path, "w") as out:
            next(source)
            for line in source:
                out.write(ISO_T.sub(r"\1 \2", line))
    return target


def run(directory, events, name, report=True):
    settings = EnvironmentSettings.in_streaming_mode()
    env = TableEnvironment.create(settings)
    env.get_config().set("parallelism.default", "1")
    for table, columns in SCHEMAS.items():
        path = headerless_copy(directory, table)
        env.execute_sql(
            f"CREATE TEMPORARY TABLE {table} ({columns}, "
            f"WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND) "
            f"WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'csv')"
        )
    result = env.sql_query(QUERIES[name])
    # Java's own rendering of a type is SQL, but for the time attribute's mark.
    columns = ", ".join(
        f"`{column.get_name()}` "
        + re.sub(r" \*\w+\*", "", column._j_column.getDataType().toString())
        for column in result.get_resolved_schema().get_columns()
    )
    env.execute_sql(
        f"CREATE TEMPORARY TABLE sink ({columns}) WITH ('connector' = 'blackhole')"
    )
    started = time.monotonic()
    result.execute_insert("sink").wait()
    seconds = time.monotonic() - started
    if report:
        print(f"{name}: {events / seconds / 1e6:.2f} M events/s ({seconds:.1f} s)", flush=True)


def main():
    directory, events, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    # The first job warms the JVM up (class loading, JIT): run one unreported.
    run(directory, events, "q2", report=False)
    for name in names or DEFAULT:
        run(directory, events, name)


if __name__ == "__main__":
    main()
