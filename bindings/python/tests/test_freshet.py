"""The Python package against the engine: every way to register a stream, every way to read
results, errors, Ctrl-C, and datafusion-python in both directions."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet as pq
import pytest

import freshet

# The reference scenarios' queries, as the comparison scripts run them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench"))
from scenario_sql import FRESHET_SQL  # noqa: E402

S3A = FRESHET_SQL["S3a"]


def sorted_rows(table: pa.Table) -> list[tuple]:
    columns = table.column_names
    rows = zip(*(table.column(c).to_pylist() for c in columns))
    return sorted(rows, key=repr)


def trades(n: int = 1000) -> pa.Table:
    return pa.table(
        {
            "symbol": [f"S{i % 3}" for i in range(n)],
            "price": [float(i % 17) for i in range(n)],
            "ts": pa.array([1_700_000_000_000 + i * 1000 for i in range(n)], pa.timestamp("ms")),
        }
    )


@pytest.fixture
def ctx() -> freshet.StreamingContext:
    return freshet.StreamingContext(partitions=2)


# Registration kinds


def test_parquet_replay_gives_the_batch_answer(ctx, tmp_path):
    pq.write_table(trades(), tmp_path / "t.parquet", row_group_size=100)
    ctx.register_parquet("t", tmp_path / "t.parquet", event_time="ts", watermark="1s")
    got = ctx.sql(
        "SELECT symbol, window_start, COUNT(*) AS n FROM t GROUP BY symbol "
        "WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)"
    ).to_table()
    assert got.num_rows == 3 * 17  # 1000 seconds: 17 one-minute windows, 3 symbols
    assert sum(got.column("n").to_pylist()) == 1000


def test_csv_json_and_arrow_files(ctx, tmp_path):
    table = trades(300)
    pa.csv.write_csv(table.set_column(2, "ts", table.column("ts").cast(pa.int64())), tmp_path / "t.csv")
    with open(tmp_path / "t.jsonl", "w") as out:
        for row in table.to_pylist():
            out.write('{"symbol": "%s", "price": %s}\n' % (row["symbol"], row["price"]))
    with pa.ipc.new_file(tmp_path / "t.arrow", table.schema) as writer:
        writer.write_table(table)
    ctx.register_csv("c", tmp_path / "t.csv")
    ctx.register_json("j", tmp_path / "t.jsonl")
    ctx.register_arrow("a", tmp_path / "t.arrow")
    ctx.register_files("auto", tmp_path / "t.arrow")
    for name in ["c", "j", "a", "auto"]:
        got = ctx.sql(f"SELECT COUNT(*) AS n, SUM(price) AS p FROM {name}").to_table()
        assert got.to_pylist() == [{"n": 300, "p": sum(table.column("price").to_pylist())}], name


def test_pyarrow_table_batches_and_frames(ctx):
    table = trades(500)
    expected = sorted_rows(
        pa.table({"symbol": ["S0", "S1", "S2"], "n": [167, 167, 166]})
    )
    query = "SELECT symbol, COUNT(*) AS n FROM {} GROUP BY symbol"
    ctx.register_stream("tbl", table)
    ctx.register_stream("batch", table.to_batches()[0])
    ctx.register_stream("batches", table.to_batches(max_chunksize=64))
    pandas = pytest.importorskip("pandas")
    polars = pytest.importorskip("polars")
    ctx.register_stream("pandas", table.to_pandas())
    ctx.register_stream("polars", polars.from_arrow(table))
    for name in ["tbl", "batch", "batches", "pandas", "polars"]:
        assert sorted_rows(ctx.sql(query.format(name)).to_table()) == expected, name
    # Out again as frames.
    assert ctx.sql(query.format("pandas")).schema.metadata is None
    frame = ctx.sql(query.format("tbl")).to_pandas()
    assert isinstance(frame, pandas.DataFrame) and len(frame) == 3
    frame = ctx.sql(query.format("tbl")).to_polars()
    assert isinstance(frame, polars.DataFrame) and frame.height == 3


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_a_table_handed_over_is_not_copied(ctx):
    import numpy

    rows = 8_000_000  # 64 MB of values
    chunks = [pa.table({"v": numpy.arange(i, rows, 4, dtype=numpy.int64)}) for i in range(4)]
    table = pa.concat_tables(chunks)  # four chunks, as a file's row groups would give
    before = resident_bytes()
    ctx.register_stream("big", table)
    grown = resident_bytes() - before
    assert grown < 8_000_000, f"registering grew the process by {grown} bytes"
    got = ctx.sql("SELECT COUNT(*) AS n, SUM(v) AS s FROM big").to_table()
    assert got.to_pylist() == [{"n": rows, "s": rows * (rows - 1) // 2}]


def test_a_table_is_replayed_by_every_query(ctx):
    ctx.register_stream("t", trades(100))
    for _ in range(2):
        assert ctx.sql("SELECT COUNT(*) AS n FROM t").to_table().to_pylist() == [{"n": 100}]


def test_a_failed_registration_keeps_the_stream_it_would_have_replaced(ctx):
    ctx.register_stream("t", trades(100))
    with pytest.raises(freshet.FreshetError, match="not found"):
        ctx.register_parquet("t", "/no/such/file.parquet")
    with pytest.raises(freshet.FreshetError, match="not found"):
        ctx.register_files("t", "/no/such/file.csv")
    assert ctx.sql("SELECT COUNT(*) AS n FROM t").to_table().to_pylist() == [{"n": 100}]
    ctx.register_generator("t", "market_data", records=7)
    assert ctx.sql("SELECT COUNT(*) AS n FROM t").to_table().to_pylist() == [{"n": 7}]


def test_generator(ctx):
    ctx.register_generator("md", "market_data", records=12_000, symbols=4)
    got = ctx.sql("SELECT COUNT(DISTINCT symbol) AS s, COUNT(*) AS n FROM md").to_table()
    assert got.to_pylist() == [{"s": 4, "n": 12_000}]
    ctx.register_generator("bid", "nexmark", events=10_000)
    assert ctx.sql("SELECT COUNT(*) AS n FROM bid").to_table().column("n")[0].as_py() > 9_000


def test_live_reader_is_read_as_it_comes_once(ctx):
    table = trades(3000)
    produced = []

    def batches():
        for batch in table.to_batches(max_chunksize=500):
            produced.append(batch.num_rows)
            yield batch

    reader = pa.RecordBatchReader.from_batches(table.schema, batches())
    ctx.register_stream("live", reader, event_time="ts")
    query = ctx.sql(
        "SELECT symbol, COUNT(*) AS n FROM live GROUP BY symbol "
        "WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)"
    )
    assert not query.is_bounded()
    rows = sum(batch.num_rows for batch in query)
    assert sum(produced) == 3000
    windows = {(s, t // 60_000) for s, t in zip(table["symbol"].to_pylist(), table["ts"].cast(pa.int64()).to_pylist())}
    assert rows == len(windows)
    with pytest.raises(freshet.FreshetError, match="read by an earlier query"):
        list(ctx.sql("SELECT * FROM live"))


def test_a_bounded_live_reader_may_be_taken_whole(ctx):
    table = trades(1000)
    reader = pa.RecordBatchReader.from_batches(table.schema, iter(table.to_batches(max_chunksize=100)))
    ctx.register_stream("live", reader, bounded=True)
    got = ctx.sql("SELECT symbol, COUNT(*) AS n FROM live GROUP BY symbol").to_table()
    assert sorted(got.column("n").to_pylist()) == [333, 333, 334]


def test_a_live_reader_that_changes_its_columns_fails_the_query(ctx):
    schema = pa.schema([("x", pa.int64())])

    def batches():
        yield pa.record_batch([pa.array([1, 2])], schema=schema)
        yield pa.record_batch([pa.array(["a"])], names=["x"])

    class Reader:
        def __arrow_c_stream__(self, requested_schema=None):
            # pyarrow checks its own readers' batches; this one hands them over unchecked.
            return pa.RecordBatchReader.from_batches(schema, batches()).__arrow_c_stream__()

    ctx.register_stream("live", Reader(), bounded=True)
    with pytest.raises(freshet.FreshetError, match="reading stream 'live' failed"):
        ctx.sql("SELECT x FROM live").to_table()


# Reading results


def test_sync_async_and_c_stream_give_the_same_rows(ctx):
    expected = sorted_rows(ctx.sql(S3A).to_table())
    assert len(expected) > 0

    async def read_async():
        return [batch async for batch in ctx.sql(S3A)]

    batches = asyncio.run(read_async())
    assert sorted_rows(pa.Table.from_batches(batches)) == expected
    reader = pa.RecordBatchReader.from_stream(ctx.sql(S3A))
    assert sorted_rows(reader.read_all()) == expected


def test_results_are_read_once(ctx):
    query = ctx.sql("SELECT COUNT(*) AS n FROM orders")
    assert query.to_table().num_rows == 1
    assert list(query) == []


def test_an_endless_query_refuses_to_table_and_stops(ctx):
    ctx.register_generator("md", "market_data", records="unbounded")
    query = ctx.sql("SELECT symbol, price FROM md")
    assert not query.is_bounded()
    with pytest.raises(freshet.FreshetError, match="ends"):
        query.to_table()
    seen = 0
    with query:
        for batch in query:
            seen += batch.num_rows
            if seen > 50_000:
                query.stop()
    assert seen > 50_000


def test_explain_late_records_and_counts(ctx):
    # Event times go back 10 minutes at row 500: those rows are late with a 1 s watermark.
    times = [1_700_000_000_000 + i * 1000 for i in range(500)]
    times += [1_700_000_000_000 + (i - 600) * 1000 for i in range(500, 600)]
    table = pa.table({"k": ["a"] * 600, "ts": pa.array(times, pa.timestamp("ms"))})
    # Batches of 50 rows: the watermark moves after each batch.
    ctx.register_stream("t", table.to_batches(max_chunksize=50), event_time="ts", watermark="1s")
    query = ctx.sql("SELECT k, COUNT(*) AS n FROM t GROUP BY k WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)")
    assert "TUMBLING" in query.explain().upper() or "Window" in query.explain()
    query.late_records()  # starts collecting
    got = query.to_table()
    assert sum(got.column("n").to_pylist()) == 500
    assert query.late_records_dropped() == 100
    late = query.late_records()
    assert late.num_rows == 100
    assert query.records_read() == 600


def test_late_records_of_hopping_windows_over_a_file(ctx, tmp_path):
    # Over a file, hopping windows are aggregated in panes and lateness judged from their
    # states, unless the late records are asked for: then each reaches the late output.
    times = [1_700_000_000_000 + i * 1000 for i in range(500)]
    times += [1_700_000_000_000 + (i - 600) * 1000 for i in range(500, 600)]
    table = pa.table({"k": ["a", "b"] * 300, "ts": pa.array(times, pa.timestamp("ms"))})
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=50)
    ctx.register_parquet("t", str(tmp_path / "t.parquet"), event_time="ts", watermark="1s")
    sql = (
        "SELECT k, window_start, COUNT(*) AS n FROM t GROUP BY k "
        "WINDOW HOPPING (ts, INTERVAL '2' MINUTE, INTERVAL '1' MINUTE)"
    )
    assert "in panes of 60000" in ctx.sql(sql).explain()
    query = ctx.sql(sql)
    query.late_records()  # starts collecting
    query.to_table()
    assert query.late_records_dropped() == query.late_records().num_rows == 100
    done = ctx.sql(sql).write(f"parquet={tmp_path / 'out.parquet'}", late_output=f"csv={tmp_path / 'late.csv'}")
    assert done["late_records_dropped"] == done["late_records_written"] == 100


def test_late_records_must_be_asked_for_first(ctx):
    query = ctx.sql(S3A)
    next(iter(query))
    with pytest.raises(freshet.FreshetError, match="before reading"):
        query.late_records()
    query.close()


def test_write_to_the_command_lines_outputs(ctx, tmp_path):
    times = [1_700_000_000_000 + i * 1000 for i in range(500)]
    times += [1_700_000_000_000 + (i - 600) * 1000 for i in range(500, 600)]
    table = pa.table({"k": ["a"] * 600, "ts": pa.array(times, pa.timestamp("ms"))})
    ctx.register_stream("t", table.to_batches(max_chunksize=50), event_time="ts", watermark="1s")
    sql = "SELECT k, window_start, COUNT(*) AS n FROM t GROUP BY k WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)"
    done = ctx.sql(sql).write(f"parquet={tmp_path / 'out.parquet'}", late_output=f"csv={tmp_path / 'late.csv'}")
    assert done["rows"] == pq.read_table(tmp_path / "out.parquet").num_rows > 0
    assert done["records"] == 600
    assert done["late_records_dropped"] == done["late_records_written"] == 100
    assert pa.csv.read_csv(tmp_path / "late.csv").num_rows == 100
    with pytest.raises(freshet.FreshetError, match="unknown output format"):
        ctx.sql(sql).write("xml")


def test_write_with_checkpoints_commits_once_and_resumes(tmp_path):
    ctx = freshet.StreamingContext(partitions=2)
    pq.write_table(trades(20_000), tmp_path / "t.parquet", row_group_size=1000)
    ctx.register_parquet("t", tmp_path / "t.parquet", event_time="ts")
    sql = "SELECT symbol, window_start, COUNT(*) AS n FROM t GROUP BY symbol WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)"
    out, checkpoints = tmp_path / "out", tmp_path / "ck"
    done = ctx.sql(sql).write(f"parquet={out}", checkpoint_dir=checkpoints, checkpoint_interval="2k")
    assert done["checkpoints"] >= 2 and not done["stopped"]
    expected = sorted_rows(ctx.sql(sql).to_table())
    assert sorted_rows(pq.read_table(out)) == expected
    again = ctx.sql(sql).write(f"parquet={out}", checkpoint_dir=checkpoints, checkpoint_interval="2k")
    assert again["already_finished"]
    assert sorted_rows(pq.read_table(out)) == expected
    with pytest.raises(freshet.FreshetError, match="(?i)query"):
        ctx.sql("SELECT symbol FROM t").write(f"parquet={out}", checkpoint_dir=checkpoints)


def test_write_with_checkpoints_commits_the_late_records_once(tmp_path):
    ctx = freshet.StreamingContext(partitions=2)
    table = trades(6_000)
    # The last 1 000 records are from long before the others: each is late.
    times = [1_700_000_000_000 + i * 1000 for i in range(6_000)]
    times = times[:5_000] + [t - 10_000_000 for t in times[5_000:]]
    table = table.set_column(2, "ts", pa.array(times, pa.timestamp("ms")))
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=500)
    ctx.register_parquet("t", tmp_path / "t.parquet", event_time="ts", watermark="1s")
    sql = "SELECT symbol, window_start, COUNT(*) AS n FROM t GROUP BY symbol WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)"
    out, late, checkpoints = tmp_path / "out", tmp_path / "late", tmp_path / "ck"
    done = ctx.sql(sql).write(
        f"parquet={out}", late_output=f"parquet={late}", checkpoint_dir=checkpoints, checkpoint_interval="1k"
    )
    assert done["late_records_dropped"] == done["late_records_written"] == 1_000
    assert pq.read_table(late).num_rows == 1_000
    with pytest.raises(freshet.FreshetError, match="overlap"):
        ctx.sql(sql).write(
            f"parquet={out}", late_output=f"parquet={out / 'late'}", checkpoint_dir=tmp_path / "ck2"
        )


def test_checkpoints_refuse_a_live_stream(ctx, tmp_path):
    table = trades(100)
    reader = pa.RecordBatchReader.from_batches(table.schema, iter(table.to_batches(max_chunksize=10)))
    ctx.register_stream("live", reader, bounded=True)
    with pytest.raises(freshet.FreshetError, match="stream 'live' is not"):
        ctx.sql("SELECT symbol, price FROM live").write(
            f"parquet={tmp_path / 'out'}", checkpoint_dir=tmp_path / "ck"
        )


# Options and errors


def test_options_take_the_command_lines_names(tmp_path):
    ctx = freshet.StreamingContext(
        partitions=1, strategy="hash", watermark="2s", settings={"changes_per": "batch"}
    )
    ctx.set("freshet.allowed_lateness_ms", "1s")
    ctx.register_generator("md", "market_data", records="10k", symbols=2, disorder_ms=500, seed=7)
    got = ctx.sql("SELECT COUNT(DISTINCT symbol) AS s FROM md").to_table()
    assert got.column("s")[0].as_py() == 2
    with pytest.raises(freshet.FreshetError, match="unknown option 'colour'"):
        ctx.register_generator("x", "market_data", colour="blue")
    with pytest.raises(freshet.FreshetError, match="expected hash"):
        freshet.StreamingContext(strategy="fastest")
    with pytest.raises(freshet.FreshetError, match="unknown setting"):
        ctx.set("no_such_setting", 1)


def test_errors_are_freshet_errors_with_the_message(ctx):
    with pytest.raises(freshet.FreshetError, match="not found"):
        ctx.register_parquet("t", "/no/such/file.parquet")
    with pytest.raises(freshet.FreshetError, match="ParserError|Expected"):
        ctx.sql("SELEC 1")
    with pytest.raises(freshet.FreshetError, match="(?i)table.*nope|nope"):
        ctx.sql("SELECT * FROM nope")
    with pytest.raises(TypeError, match="Arrow data"):
        ctx.register_stream("t", object())


def seconds_from_ctrl_c_to_keyboard_interrupt(tmp_path, run: str, after: float) -> float:
    """Runs ``run`` (Python code using ``ctx``, a context with the endless stream ``md``) in
    a child process, sends it SIGINT ``after`` seconds in, and returns how long the
    KeyboardInterrupt took to reach the child's code."""
    script = tmp_path / "endless.py"
    body = textwrap.indent(textwrap.dedent(run).strip(), "    ")
    script.write_text(
        "import sys, time, freshet\n"
        "ctx = freshet.StreamingContext(partitions=2)\n"
        'ctx.register_generator("md", "market_data", records="unbounded", rate=1000)\n'
        'print("started", flush=True)\n'
        "try:\n"
        f"{body}\n"
        "except KeyboardInterrupt:\n"
        '    print("interrupted", time.monotonic(), flush=True)\n'
        "    sys.exit(0)\n"
    )
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "started"
    time.sleep(after)
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    line = child.stdout.readline().split()
    assert child.wait(timeout=10) == 0
    assert line[0] == "interrupted", line
    return float(line[1]) - sent


def test_ctrl_c_during_an_endless_query_raises_keyboard_interrupt_quickly(tmp_path):
    # One-day windows: no result for many seconds, so the interrupt comes while the loop
    # waits inside Freshet.
    run = """
        query = ctx.sql(
            "SELECT symbol, COUNT(*) AS n FROM md GROUP BY symbol "
            "WINDOW TUMBLING (trade_time, INTERVAL '1' DAY)"
        )
        for batch in query:
            pass
    """
    assert seconds_from_ctrl_c_to_keyboard_interrupt(tmp_path, run, after=1.0) < 1.0


def test_ctrl_c_during_an_endless_write_closes_the_output_then_raises(tmp_path):
    out = tmp_path / "out.parquet"
    run = f"""ctx.sql("SELECT symbol, price FROM md").write("parquet={out}")"""
    assert seconds_from_ctrl_c_to_keyboard_interrupt(tmp_path, run, after=1.5) < 1.0
    assert pq.read_table(out).num_rows > 500


def test_iteration_leaves_other_python_threads_running(ctx):
    ctx.register_generator("md", "market_data", records="unbounded", rate=2000)
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    thread = threading.Thread(target=tick)
    thread.start()
    query = ctx.sql("SELECT symbol FROM md")
    started = time.monotonic()
    for _ in query:
        if time.monotonic() - started > 0.5:
            break
    query.close()
    stop.set()
    thread.join()
    assert len(ticks) > 20


def test_a_query_is_read_by_one_thread_at_a_time(ctx):
    ctx.register_generator("md", "market_data", records="unbounded", rate=1000)
    query = ctx.sql(
        "SELECT symbol, COUNT(*) AS n FROM md GROUP BY symbol WINDOW TUMBLING (trade_time, INTERVAL '1' DAY)"
    )
    waiting = threading.Thread(target=lambda: next(query, None))
    waiting.start()
    time.sleep(0.5)
    with pytest.raises(freshet.FreshetError, match="another thread"):
        next(query)
    query.stop()
    waiting.join(timeout=30)
    assert not waiting.is_alive()


# datafusion-python


def test_datafusion_python_reads_a_freshet_stream_and_query(ctx):
    datafusion = pytest.importorskip("datafusion")
    ctx.register_stream("t", trades(900))
    session = datafusion.SessionContext()
    session.register_table("t", ctx.table_provider("t"))
    got = session.sql("SELECT symbol, COUNT(*) AS n FROM t GROUP BY symbol ORDER BY symbol").to_arrow_table()
    assert got.column("n").to_pylist() == [300, 300, 300]
    query = ctx.sql("SELECT symbol, MAX(price) AS top FROM t GROUP BY symbol")
    session.register_table("tops", query.table_provider())
    got = session.sql("SELECT SUM(top) AS s FROM tops").to_arrow_table()
    assert got.column("s")[0].as_py() == 16.0 * 3


def test_a_datafusion_dataframe_is_a_bounded_stream(ctx):
    datafusion = pytest.importorskip("datafusion")
    session = datafusion.SessionContext()
    frame = session.from_arrow(trades(600))
    ctx.register_stream("df", frame, event_time="ts")
    got = ctx.sql(
        "SELECT symbol, COUNT(*) AS n FROM df GROUP BY symbol WINDOW TUMBLING (ts, INTERVAL '1' MINUTE)"
    ).to_table()
    assert sum(got.column("n").to_pylist()) == 600


# The reference scenarios equal the command line's answers


@pytest.mark.parametrize("scenario", ["S0", "S1", "S2", "S3a", "S3b"])
def test_scenarios_equal_the_command_line(scenario, tmp_path):
    cli = os.environ.get("FRESHET_CLI")
    if not cli:
        pytest.skip("FRESHET_CLI (the freshet binary) not set")
    sql = FRESHET_SQL[scenario]
    tables = ["--table", "market_data=generator:market_data,records=50k", "--table", "orders=generator:orders,records=50k"]
    out = tmp_path / "cli.parquet"
    subprocess.run([cli, "query", sql, *tables, "--partitions", "2", "-o", f"parquet={out}"], check=True, capture_output=True)
    expected = pq.read_table(out)
    ctx = freshet.StreamingContext(partitions=2)
    ctx.register_generator("market_data", "market_data", records="50k")
    ctx.register_generator("orders", "orders", records="50k")
    got = ctx.sql(sql).to_table()
    assert got.schema.names == expected.schema.names
    assert sorted_rows(got) == sorted_rows(expected)
