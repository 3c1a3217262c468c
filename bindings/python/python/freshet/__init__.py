"""Freshet: streaming SQL on Apache DataFusion and Arrow.

Register streams on a :class:`StreamingContext` (Parquet, CSV, JSON-lines or Arrow files
replayed as streams, Arrow data you already have, live readers, built-in generators), run
streaming SQL over them, and read the results as ``pyarrow.RecordBatch`` es as they arrive::

    import freshet
    ctx = freshet.StreamingContext(partitions=2)
    ctx.register_parquet("trades", "data/trades/", event_time="trade_time", watermark="5s")
    q = ctx.sql("SELECT symbol, window_start, COUNT(*) AS n FROM trades "
                "GROUP BY symbol WINDOW TUMBLING (1m)")
    for batch in q:
        print(batch.num_rows)

Options take the names and values of the ``freshet`` command line (``docs/sql.md``).
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Iterator

import pyarrow as pa

from . import _freshet
from ._freshet import FreshetError, __version__

__all__ = ["StreamingContext", "Query", "FreshetError", "__version__"]

# How long an async iteration waits in its worker thread before giving the event loop a
# chance to cancel it.
_ASYNC_SLICE_SECONDS = 0.1


def _arrow_stream(data: Any) -> Any:
    """``data`` as an object with ``__arrow_c_stream__``: pyarrow, polars and
    datafusion-python objects have one; pandas frames go through ``pyarrow.Table``; a
    single batch or a list of batches becomes a table."""
    if type(data).__module__.split(".")[0] == "pandas":
        # Without pandas' schema metadata, which would follow the rows into every result.
        return pa.Table.from_pandas(data, preserve_index=False).replace_schema_metadata(None)
    if hasattr(data, "__arrow_c_stream__"):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, (list, tuple)) and all(isinstance(b, pa.RecordBatch) for b in data):
        if not data:
            raise FreshetError("an empty list of batches has no schema: pass a pyarrow Table")
        return pa.Table.from_batches(list(data))
    module = type(data).__module__.split(".")[0]
    if module == "polars":
        return data.to_arrow()
    raise TypeError(
        "expected Arrow data: a pyarrow Table, RecordBatch or RecordBatchReader, a pandas or "
        f"polars DataFrame, a datafusion DataFrame or an object with __arrow_c_stream__; got {type(data).__name__}"
    )


def _is_whole(data: Any) -> bool:
    """Whether ``data`` is data at rest (read whole at registration) rather than a reader
    (read as it comes, once)."""
    if isinstance(data, (pa.Table, pa.RecordBatch, list, tuple)):
        return True
    module = type(data).__module__.split(".")[0]
    kind = type(data).__name__
    return (module, kind) in {
        ("pandas", "DataFrame"),
        ("polars", "DataFrame"),
        ("datafusion", "DataFrame"),
    }


class StreamingContext:
    """A streaming session, as the ``freshet`` command line has it.

    Args:
        partitions: streams (cores) each query runs on; default: one per core.
        strategy: how keyed operators are fed (hash, sticky, round_robin, fan_in, two_phase);
            default: chosen from the plan.
        event_time: the event-time column of every file stream registered without one.
        watermark: the watermark delay of every stream registered without one, e.g. ``"5s"``.
        settings: session settings, as ``--set KEY=VALUE`` (a key without a dot is a
            ``freshet.`` setting), e.g. ``{"allowed_lateness_ms": "5s"}``.

    Like the command line, the context has the generator streams ``market_data`` and
    ``orders`` and Nexmark's ``person``, ``auction`` and ``bid`` (1 M records/events) until
    you register streams of those names.
    """

    def __init__(
        self,
        partitions: int | None = None,
        *,
        strategy: str | None = None,
        event_time: str | None = None,
        watermark: Any = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        self._ctx = _freshet.Context(partitions, strategy, event_time, watermark, settings)

    def set(self, key: str, value: Any) -> None:
        """Sets a session setting, as ``SET key = 'value'`` does."""
        self._ctx.set(key, value)

    def register_files(self, name: str, path: Any, format: str | None = None, **options: Any) -> None:
        """Registers a file or directory replayed as a stream, in ``format`` (parquet, csv,
        arrow, json) or the one its extension names. Options: event_time, event_time_unit,
        watermark, bounded, partitions, partitioned_by, rate, idle_timeout, memory_map."""
        self._ctx.register_files(name, path, format, **options)

    def register_parquet(self, name: str, path: Any, **options: Any) -> None:
        """Registers a Parquet file or directory replayed as a stream."""
        self._ctx.register_files(name, path, "parquet", **options)

    def register_csv(self, name: str, path: Any, **options: Any) -> None:
        """Registers a CSV file (with a header line) or directory replayed as a stream."""
        self._ctx.register_files(name, path, "csv", **options)

    def register_json(self, name: str, path: Any, **options: Any) -> None:
        """Registers a JSON-lines file or directory replayed as a stream."""
        self._ctx.register_files(name, path, "json", **options)

    def register_arrow(self, name: str, path: Any, **options: Any) -> None:
        """Registers an Arrow IPC file or directory replayed as a stream."""
        self._ctx.register_files(name, path, "arrow", **options)

    def register_generator(self, name: str, kind: str, **options: Any) -> None:
        """Registers a built-in generator: ``market_data``, ``orders``, or ``nexmark`` for a
        stream named person, auction or bid. Parameters as the command line's: records (a
        count or ``"unbounded"``), events, batch_size, step_ms, disorder_ms, seed, symbols,
        traders, customers, amount_base, and the stream options."""
        self._ctx.register_generator(name, kind, **options)

    def register_stream(self, name: str, data: Any, *, bounded: bool | None = None, **options: Any) -> None:
        """Registers Arrow data as a stream.

        Data at rest (a pyarrow Table or RecordBatch, a list of batches, a pandas or polars
        DataFrame, a datafusion-python DataFrame) is a bounded replay, read again by every
        query; its buffers are not copied. A reader (a ``pyarrow.RecordBatchReader`` or any
        object with ``__arrow_c_stream__`` that is not data at rest) is a live stream: read
        as it comes, in its order, once, by the first query over it. It is planned as endless
        unless ``bounded=True``.
        """
        stream = _arrow_stream(data)
        if _is_whole(data):
            if bounded is False:
                options["bounded"] = False
            self._ctx.register_batches(name, stream, **options)
        else:
            self._ctx.register_live(name, stream, bool(bounded), **options)

    def deregister(self, name: str) -> None:
        """Removes the stream ``name``."""
        self._ctx.deregister(name)

    def tables(self) -> list[str]:
        """The names of the registered streams."""
        return self._ctx.tables()

    def table_provider(self, name: str) -> Any:
        """The stream ``name`` for datafusion-python:
        ``datafusion.SessionContext().register_table("t", ctx.table_provider("t"))``."""
        return self._ctx.table_provider(name)

    def sql(self, query: str) -> "Query":
        """Plans ``query`` (Freshet's streaming SQL) as a :class:`Query`; it runs when its
        results are first read."""
        return Query(self._ctx.sql(query))


class Query:
    """A planned streaming query. Iterate it (``for``, ``async for``) for its results as
    ``pyarrow.RecordBatch`` es as they arrive; read it as an Arrow C stream
    (``pyarrow.RecordBatchReader.from_stream(q)``); or, for a bounded query,
    take all of it (``to_table``, ``to_pandas``, ``to_polars``). Results are read once.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._late_schema: pa.Schema | None = None

    # Results

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self

    def __next__(self) -> pa.RecordBatch:
        batch = self._inner.next_batch()
        if batch is None:
            raise StopIteration
        return pa.record_batch(batch)

    def __aiter__(self) -> AsyncIterator[pa.RecordBatch]:
        return self

    async def __anext__(self) -> pa.RecordBatch:
        while True:
            batch = await asyncio.to_thread(self._inner.next_batch, _ASYNC_SLICE_SECONDS)
            if batch is None:
                raise StopAsyncIteration
            if batch is not False:
                return pa.record_batch(batch)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._inner.__arrow_c_stream__(requested_schema)

    @property
    def schema(self) -> pa.Schema:
        """The schema of the results."""
        return pa.schema(self._inner.schema())

    def is_bounded(self) -> bool:
        """Whether the query ends (every stream it reads is bounded)."""
        return self._inner.is_bounded()

    def _refuse_endless(self, what: str) -> None:
        if not self._inner.is_bounded():
            raise FreshetError(
                f"{what} needs a query that ends, and this one reads an endless stream: iterate "
                "its results instead, or stop() it from another thread"
            )

    def to_table(self) -> pa.Table:
        """All results as one table (bounded queries only)."""
        self._refuse_endless("to_table()")
        return pa.Table.from_batches(list(self), schema=self.schema)

    def to_pandas(self) -> Any:
        """All results as a pandas DataFrame (bounded queries only)."""
        self._refuse_endless("to_pandas()")
        return self.to_table().to_pandas()

    def to_polars(self) -> Any:
        """All results as a polars DataFrame (bounded queries only)."""
        self._refuse_endless("to_polars()")
        import polars

        return polars.from_arrow(self.to_table())

    def write(
        self,
        output: str = "table",
        *,
        late_output: str | None = None,
        checkpoint_dir: Any = None,
        checkpoint_interval: str = "10s",
        checkpoints_kept: int = 3,
    ) -> dict[str, Any]:
        """Runs the query into one of the command line's outputs (``table[=ROWS]``,
        ``csv[=PATH]``, ``jsonl[=PATH]``, ``parquet=PATH``, ``arrow=PATH``, ``null``), as
        ``freshet query -o OUTPUT`` does, and returns what the run did (rows, records,
        seconds, late records). ``late_output`` also writes the records dropped as late.
        With ``checkpoint_dir`` the run takes checkpoints every ``checkpoint_interval``
        (``"10s"``, ``"1M"`` records) and resumes from the latest one; a file output is
        then a directory of committed part files, exactly once. Ctrl-C stops the query as
        the command line's does (at the next checkpoint, with checkpoints), closes the
        output, and then raises ``KeyboardInterrupt``."""
        return self._inner.write(output, late_output, checkpoint_dir, checkpoint_interval, checkpoints_kept)

    # Control and inspection

    def explain(self) -> str:
        """The plan, as ``freshet explain`` prints it."""
        return self._inner.explain()

    def stop(self) -> None:
        """Ends the streams the query reads, as if their data had ended: open windows are
        emitted and the results then end (as the command line's first Ctrl-C does)."""
        self._inner.stop()

    def close(self) -> None:
        """Stops the query and drops whatever it still runs."""
        self._inner.close()

    def __enter__(self) -> "Query":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def records_read(self) -> int:
        """Records the query's streams have handed out so far."""
        return self._inner.records_read()

    def late_records_dropped(self) -> int:
        """Records dropped as late so far."""
        return self._inner.late_records_dropped()

    def late_records(self) -> pa.Table:
        """The records the query dropped as late so far, as a table of their input columns
        (one schema for every operator that drops records). The first call, which must come
        before the results are read, starts collecting them."""
        if self._late_schema is None:
            self._late_schema = pa.schema(self._inner.subscribe_late_records())
        batches = [pa.record_batch(b) for b in self._inner.late_batches()]
        return pa.Table.from_batches(batches, schema=self._late_schema)

    def table_provider(self) -> Any:
        """The results for datafusion-python: ``SessionContext().register_table("r",
        q.table_provider())``; each scan there runs the query."""
        return self._inner.table_provider()

    def __repr__(self) -> str:
        return f"<freshet.Query bounded={self.is_bounded()} schema={self.schema}>"
