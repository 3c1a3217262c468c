#!/usr/bin/env python3
"""What DataFusion's own hash join costs when it keeps the side a streaming join must keep.

    pip install datafusion pyarrow
    cargo build --release
    ./target/release/freshet gen nexmark --events 10M --out /tmp/nx10m
    python3 bench/nexmark_join_sides.py /tmp/nx10m 3 [q3,q4,q20]

A batch hash join builds a table over one input (the smaller) and streams the other past it.
A streaming join cannot choose: a row of either side may meet a row of the other that has
not arrived yet, so it keeps and indexes both (q20 every bid, q4 the bids of the last
watermark delay). This script loads the three Nexmark tables into memory (pyarrow, batches of
8 192 rows) and runs each join query in DataFusion at one partition three ways, in turns:
as DataFusion plans it, and with join reordering off and each side in turn as the build
(left) side. Reported per query and plan: the median wall and CPU seconds (user + system of
this process) and the output rows. Not part of the build or the tests: Python packages are
for comparison scripts only.
"""
import resource, statistics, sys, time

import pyarrow.parquet as pq
from datafusion import SessionConfig, SessionContext

QUERIES = {
    # (SQL with {left} and {right}, one side, the other side)
    "q3": ("SELECT p.name, p.city, p.state, a.id FROM {left} INNER JOIN {right} ON a.seller = p.id "
           "WHERE a.category = 10 AND (p.state = 'OR' OR p.state = 'ID' OR p.state = 'CA')",
           "auction AS a", "person AS p"),
    "q4": ("SELECT q.category, AVG(q.final) AS final FROM (SELECT MAX(b.price) AS final, a.category "
           "FROM {left} INNER JOIN {right} ON a.id = b.auction "
           "AND b.date_time BETWEEN a.date_time AND a.expires GROUP BY a.id, a.category) q GROUP BY q.category",
           "bid AS b", "auction AS a"),
    "q20": ("SELECT auction, bidder, price, channel, url, b.date_time AS date_time, b.extra AS extra, "
            "item_name, description, initial_bid, reserve, a.date_time AS auction_date_time, expires, "
            "seller, category, a.extra AS auction_extra FROM {left} INNER JOIN {right} ON b.auction = a.id "
            "WHERE a.category = 10",
            "bid AS b", "auction AS a"),
}


def context(tables, reorder):
    config = (SessionConfig().with_target_partitions(1)
              .set("datafusion.optimizer.join_reordering", "true" if reorder else "false"))
    ctx = SessionContext(config)
    for name, table in tables.items():
        ctx.register_record_batches(name, [table.to_batches(max_chunksize=8192)])
    return ctx


def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(ctx, sql):
    before, start = cpu(), time.perf_counter()
    rows = sum(batch.num_rows for batch in ctx.sql(sql).collect())
    return time.perf_counter() - start, cpu() - before, rows


def main():
    directory, rounds = sys.argv[1], int(sys.argv[2])
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else list(QUERIES)
    tables = {name: pq.read_table(f"{directory}/{name}.parquet") for name in ("person", "auction", "bid")}
    planned, fixed = context(tables, True), context(tables, False)
    for name in names:
        sql, one, other = QUERIES[name]
        plans = {
            "as planned": (planned, sql.format(left=one, right=other)),
            f"{one.split()[0]} built": (fixed, sql.format(left=one, right=other)),
            f"{other.split()[0]} built": (fixed, sql.format(left=other, right=one)),
        }
        results = {plan: [] for plan in plans}
        for _ in range(rounds):
            for plan, (ctx, text) in plans.items():
                results[plan].append(run(ctx, text))
        for plan, runs in results.items():
            wall = statistics.median(r[0] for r in runs)
            cpu_s = statistics.median(r[1] for r in runs)
            print(f"{name} {plan:>16}: {wall:.3f} s wall, {cpu_s:.3f} CPU s, {runs[0][2]} rows")


if __name__ == "__main__":
    main()
