#!/usr/bin/env python3
"""A second oracle, run on demand: random queries over random small Parquet files, through the
`freshet query` command line at 1, 2 and 4 streams, against DuckDB on the same file.

    pip install duckdb pyarrow
    cargo build --release
    python3 bench/duckdb_diff.py FIRST_SEED CASES        # FORM=over restricts the query forms

Each case's table and query come from its seed. Rows are compared as multisets, numbers to
five significant digits (a query under a LIMIT, one in ten: its rows as many as the limit
allows, all among DuckDB's rows without the LIMIT); rows that differ only by a unit in the fifth digit are reported as
such, not as a mismatch (DataFusion truncates a decimal AVG to its scale, DuckDB returns a
double that rounds). Window functions order ties in ORDER BY by stored order on both sides (`ts, id` for
DuckDB); where Freshet leaves a window function to DataFusion, whose sort orders ties
otherwise, a difference is reported as such, not as a mismatch. Not part of the build or the
tests: Python packages are for comparison scripts only.
"""
import collections, datetime, decimal, json, math, os, random, subprocess, sys, tempfile
import duckdb, pyarrow as pa, pyarrow.parquet as pq

FRESHET = os.environ.get("FRESHET", os.path.join(os.path.dirname(__file__), "..", "target", "release", "freshet"))
D = tempfile.mkdtemp(prefix="freshet-duckdb-diff-")


def gen_table(r, path):
    n = r.choice([0, 1, 3, 17, 60, 200, 1000])
    ks = ["a", "b", "c", "é", "", None, "longer key value x"]
    t0 = 1_700_000_000_000
    ts, cur = [], t0
    for _ in range(n):
        cur += r.choice([0, 0, 1, 7, 250, 1000, 3000])
        ts.append(cur)
    def maybe(v, p=0.15):
        return None if r.random() < p else v
    cols = {
        "id": pa.array(list(range(n)), pa.int64()),
        "k": pa.array([r.choice(ks) for _ in range(n)], pa.string()),
        "g": pa.array([maybe(r.randint(-3, 3)) for _ in range(n)], pa.int32()),
        "v": pa.array([maybe(r.choice([r.uniform(-100, 100), 0.0, -0.0, 1.5, 2.25])) for _ in range(n)], pa.float64()),
        "i": pa.array([maybe(r.randint(-50, 50)) for _ in range(n)], pa.int64()),
        "b": pa.array([maybe(r.random() < 0.5) for _ in range(n)], pa.bool_()),
        "d": pa.array([maybe(datetime.date(2024, 1, 1) + datetime.timedelta(days=r.randint(0, 40))) for _ in range(n)], pa.date32()),
        "dec": pa.array([maybe(decimal.Decimal(r.randint(-10000, 10000)) / 100) for _ in range(n)], pa.decimal128(10, 2)),
        "s": pa.array([maybe(r.choice(["alpha", "beta gamma delta epsilon", "z", "ÄÖÜ unicode text here", "a%b"])) for _ in range(n)], pa.string()),
        "ts": pa.array(ts, pa.timestamp("ms")),
    }
    table = pa.table(cols)
    rg = r.choice([7, 50, 128, 100000])
    pq.write_table(table, path, row_group_size=max(rg, 1), use_dictionary=r.random() < 0.7)
    return table


PREDS = ["i > 0", "i IS NULL", "k = 'a'", "k IN ('a', 'b')", "g BETWEEN -1 AND 1", "v < 10",
         "NOT b", "b IS NOT DISTINCT FROM true", "s LIKE '%a%'", "length(k) > 1", "d >= DATE '2024-01-20'",
         "dec > 0", "i % 3 = 0", "COALESCE(g, 0) <> 0", "k IS DISTINCT FROM 'b'", "TRUE", "FALSE",
         "v IS NULL OR i > 10", "upper(k) = 'A'"]
EXPRS = ["CASE WHEN i > 0 THEN 'p' WHEN i < 0 THEN 'n' END", "COALESCE(g, -1)", "upper(k)", "length(s)",
         "i * 2 + g", "CAST(dec AS DOUBLE)", "substr(s, 2, 3)", "k || '-' || s", "abs(i)", "v / 2",
         "i % 3", "NOT b", "k IN ('a', 'c')", "g IS NULL", "dec * 2", "d", "ts", "CAST(i AS DOUBLE) / 4",
         "greatest(i, g)", "nullif(g, 0)", "round(v, 1)", "trim(s)", "lower(s)", "i + 1", "-i"]
AGGS = ["COUNT(*)", "COUNT(i)", "SUM(i)", "SUM(dec)", "AVG(v)", "MIN(s)", "MAX(k)", "MIN(d)", "MAX(ts)",
        "COUNT(DISTINCT g)", "bool_and(b)", "bool_or(b)", "MIN(v)", "MAX(v)", "SUM(g)", "AVG(i)",
        "MAX(dec)", "MIN(i)", "SUM(v)", "COUNT(DISTINCT k)", "AVG(dec)"]
KEYS = ["k", "g", "b", "d", "k, g", "g, b", "dec", "i % 4", "upper(k)"]
OVERS = ["ROW_NUMBER() OVER (PARTITION BY {p} ORDER BY {o})",
         "LAG(i, 1) OVER (PARTITION BY {p} ORDER BY {o})",
         "LAG(v, 2, 0.5) OVER (PARTITION BY {p} ORDER BY {o})",
         "SUM(i) OVER (PARTITION BY {p} ORDER BY {o} ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)",
         "COUNT(*) OVER (PARTITION BY {p} ORDER BY {o} ROWS UNBOUNDED PRECEDING)",
         "MIN(v) OVER (PARTITION BY {p} ORDER BY {o} ROWS BETWEEN 3 PRECEDING AND CURRENT ROW)",
         "MAX(s) OVER (PARTITION BY {p} ORDER BY {o} ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)",
         "AVG(dec) OVER (PARTITION BY {p} ORDER BY {o} ROWS BETWEEN 4 PRECEDING AND CURRENT ROW)",
         "FIRST_VALUE(i) OVER (PARTITION BY {p} ORDER BY {o} ROWS UNBOUNDED PRECEDING)",
         "COUNT(i) OVER (PARTITION BY {p} ORDER BY {o} ROWS BETWEEN 5 PRECEDING AND CURRENT ROW)",
         "SUM(v) OVER (PARTITION BY {p} ORDER BY {o} ROWS UNBOUNDED PRECEDING)",
         "SUM(i) OVER (PARTITION BY {p} ORDER BY ts)",
         "COUNT(*) OVER (PARTITION BY {p} ORDER BY ts)",
         "RANK() OVER (PARTITION BY {p} ORDER BY ts)",
         "DENSE_RANK() OVER (PARTITION BY {p} ORDER BY ts)",
         "MAX(i) OVER (PARTITION BY {p} ORDER BY ts RANGE BETWEEN INTERVAL '2' SECOND PRECEDING AND CURRENT ROW)",
         "COUNT(*) OVER (PARTITION BY {p} ORDER BY ts RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW)",
         "SUM(i) OVER (ORDER BY {o} ROWS BETWEEN 3 PRECEDING AND CURRENT ROW)",
         "LEAD(i, 1) OVER (PARTITION BY {p} ORDER BY {o})",
         "SUM(i) OVER (PARTITION BY {p})",
         "COUNT(*) OVER ()",
         "ROW_NUMBER() OVER (PARTITION BY {p} ORDER BY {o})",
         "LAG(i) OVER (PARTITION BY {p} ORDER BY {o})",
         "SUM(i) OVER (PARTITION BY {p} ORDER BY {o} ROWS BETWEEN 2 PRECEDING AND CURRENT ROW)",
         "PERCENT_RANK() OVER (PARTITION BY {p} ORDER BY ts)",
         "CUME_DIST() OVER (PARTITION BY {p} ORDER BY ts)"]


def gen_query(r):
    form = os.environ.get("FORM") or r.choice(["stateless", "group", "global", "over", "over", "group", "window", "hop",
                     "distinct", "union", "cte", "join", "join", "filteragg", "session"])
    where = f" WHERE {r.choice(PREDS)}" if r.random() < 0.6 else ""
    if form == "stateless":
        items = ", ".join(f"{e} AS c{j}" for j, e in enumerate(r.sample(EXPRS, r.randint(1, 4))))
        return form, f"SELECT id, {items} FROM t{where}", None
    if form in ("group", "global"):
        aggs = ", ".join(f"{a} AS a{j}" for j, a in enumerate(r.sample(AGGS, r.randint(1, 4))))
        if form == "global":
            return form, f"SELECT {aggs} FROM t{where}", None
        key = r.choice(KEYS)
        having = " HAVING COUNT(*) > 1" if r.random() < 0.2 else ""
        keys = ", ".join(f"{k} AS key{j}" for j, k in enumerate(key.split(", ")))
        return form, f"SELECT {keys}, {aggs} FROM t{where} GROUP BY {key}{having}", None
    if form == "window":
        size = r.choice([1, 2, 10, 60])
        key = r.choice(["k", "g", "b"])
        aggs = ", ".join(f"{a} AS a{j}" for j, a in enumerate(r.sample(AGGS, r.randint(1, 3))))
        fq = f"SELECT {key}, window_start, {aggs} FROM t{where} GROUP BY {key} WINDOW TUMBLING (ts, INTERVAL '{size}' SECOND)"
        dq = f"SELECT {key}, time_bucket(INTERVAL '{size} seconds', ts) AS window_start, {aggs} FROM t{where} GROUP BY {key}, time_bucket(INTERVAL '{size} seconds', ts)"
        return form, fq, dq
    if form == "hop":
        slide = r.choice([1, 2, 5]); size = slide * r.choice([2, 3])
        key = r.choice(["k", "g"])
        aggs = ", ".join(f"{a} AS a{j}" for j, a in enumerate(r.sample(AGGS, r.randint(1, 3))))
        fq = f"SELECT {key} AS key0, window_start, {aggs} FROM t{where} GROUP BY {key} WINDOW HOPPING (ts, INTERVAL '{size}' SECOND, INTERVAL '{slide}' SECOND)"
        dq = (f"SELECT {key} AS key0, ws AS window_start, {aggs} FROM (SELECT *, unnest(generate_series(time_bucket(INTERVAL '{slide} seconds', ts) - INTERVAL '{size - slide} seconds', "
              f"time_bucket(INTERVAL '{slide} seconds', ts), INTERVAL '{slide} seconds')) AS ws FROM t{where}) GROUP BY {key}, ws")
        return form, fq, dq
    if form == "session":
        gap = r.choice([1, 2, 5])
        key = r.choice(["k", "g", "b"])
        aggs = ", ".join(f"{a} AS a{j}" for j, a in enumerate(r.sample(AGGS, r.randint(1, 3))))
        fq = f"SELECT {key} AS key0, window_start, {aggs} FROM t{where} GROUP BY {key} WINDOW SESSION (ts, INTERVAL '{gap}' SECOND)"
        # DuckDB: a new session where the gap to the key's previous record is reached. Both
        # windows order ties by id: sorted apart, equal times could be numbered in another
        # order than the one their breaks were marked in.
        dq = (f"WITH kept AS (SELECT * FROM t{where}), "
              f"marked AS (SELECT *, CASE WHEN ts - LAG(ts) OVER (PARTITION BY {key} ORDER BY ts, id) < INTERVAL '{gap} seconds' THEN 0 ELSE 1 END AS fresh FROM kept), "
              f"numbered AS (SELECT *, SUM(fresh) OVER (PARTITION BY {key} ORDER BY ts, id ROWS UNBOUNDED PRECEDING) AS sid FROM marked) "
              f"SELECT {key} AS key0, MIN(ts) AS window_start, {aggs} FROM numbered GROUP BY {key}, sid")
        return form, fq, dq
    if form == "distinct":
        cols = r.choice(["k", "k, g", "b, g", "upper(k) AS uk", "g, d"])
        return form, f"SELECT DISTINCT {cols} FROM t{where}", None
    if form == "union":
        return form, f"SELECT id, k, i FROM t WHERE {r.choice(PREDS)} UNION ALL SELECT id, k, i * 10 FROM t WHERE {r.choice(PREDS)}", None
    if form == "cte":
        aggs = r.choice(["SUM(j) AS s", "COUNT(*) AS n, MAX(j) AS m", "AVG(j) AS a"])
        return form, f"WITH x AS (SELECT k, i * 2 AS j, ts FROM t{where}) SELECT k AS key0, {aggs} FROM x GROUP BY k", None
    if form == "filteragg":
        key = r.choice(["k", "g", "b"])
        aggs = r.sample(["COUNT(*) FILTER (WHERE i > 0)", "SUM(i) FILTER (WHERE b)", "MAX(v) FILTER (WHERE k = 'a')",
                         "stddev_samp(v)", "var_pop(i)", "COUNT(*)", "MIN(s) FILTER (WHERE g > 0)"], 2)
        return form, f"SELECT {key} AS key0, " + ", ".join(f"{a} AS a{j}" for j, a in enumerate(aggs)) + f" FROM t{where} GROUP BY {key}", None
    if form == "join":
        kind = r.choice(["JOIN", "JOIN", "LEFT JOIN"])
        lo, hi = r.choice([(1, 0), (2, 1), (0, 0), (5, 0)])
        on = r.choice(["a.k = b.k AND ", "a.g = b.g AND ", ""])
        w = r.choice(["", " WHERE a.i > 0", " WHERE b.id IS NULL OR a.id <> b.id"])
        q = (f"SELECT a.id AS aid, b.id AS bid, a.i AS ai, b.v AS bv FROM t a {kind} t b ON {on}b.ts BETWEEN a.ts - INTERVAL '{lo}' SECOND AND a.ts + INTERVAL '{hi}' SECOND{w}")
        return form, q, None
    p = r.choice(["k", "g", "b", "k, g", "i % 2"])
    chosen = r.sample(OVERS, r.randint(1, 3))
    fo = r.choice(["ts", "ts", "ts, id"])
    fq = "SELECT id, " + ", ".join(f"{f.format(p=p, o=fo)} AS w{j}" for j, f in enumerate(chosen)) + f" FROM t{where}"
    # DuckDB: ties in ts follow the stored order (id), as Freshet promises for one source.
    dq = "SELECT id, " + ", ".join(f"{f.format(p=p, o='ts, id')} AS w{j}" for j, f in enumerate(chosen)) + f" FROM t{where}"
    return form, fq, dq


def canon(v):
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, decimal.Decimal)):
        f = float(v)
        if math.isnan(f):
            return "NaN"
        if f == 0:
            return "0"
        return f"{f:.5g}"
    if isinstance(v, datetime.datetime):
        return v.strftime("%Y-%m-%dT%H:%M:%S.%f")
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, str):
        # timestamps from the JSON writer
        for fmt in ("%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
            try:
                return datetime.datetime.strptime(v, fmt).strftime("%Y-%m-%dT%H:%M:%S.%f")
            except ValueError:
                pass
        try:
            if v.strip() and v.lstrip("-").replace(".", "", 1).isdigit():
                return canon(float(v))
        except ValueError:
            pass
        return v
    return str(v)


def as_number(text):
    try:
        return float(text)
    except ValueError:
        return None


def coarse(row):
    """`row` with its numbers to four significant digits: a key that pairs rows differing
    only in the fifth."""
    out = []
    for text in row:
        f = as_number(text)
        out.append(text if f is None or math.isnan(f) else f"{f:.4g}")
    return tuple(out)


def within_last_digit(expect, got):
    """Whether the rows are the same but for a unit in the fifth significant digit of some
    numbers: DataFusion truncates a decimal AVG to its scale, DuckDB's double rounds."""
    if len(expect) != len(got):
        return False
    for e_row, g_row in zip(sorted(expect, key=coarse), sorted(got, key=coarse)):
        for e, g in zip(e_row, g_row):
            if e == g:
                continue
            a, b = as_number(e), as_number(g)
            if a is None or b is None or a == 0:
                return False
            unit = 10 ** (math.floor(math.log10(abs(a))) - 4)
            if abs(a - b) > 1.5 * unit:
                return False
    return True


def run_freshet(sql, path, parts):
    cmd = [FRESHET, "query", sql, "--table", f"t={path},event_time=ts", "--partitions", str(parts), "-o", "jsonl"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
    rows = []
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            rows.append(json.loads(line))
    return rows, None


def main():
    seed0 = int(sys.argv[1]); cases = int(sys.argv[2])
    fails = refusals = ok = 0
    for c in range(cases):
        seed = seed0 + c
        r = random.Random(seed)
        path = f"{D}/t{seed % 4}.parquet"
        gen_table(r, path)
        form, fq, dq = gen_query(r)
        dq = dq or fq
        # One query in ten ends with a LIMIT, drawn apart so that a seed's case is otherwise
        # unchanged: its rows must be as many as the limit allows, all among DuckDB's
        # rows of the query without it.
        lr = random.Random(seed ^ 0x4C494D4954)
        limit = lr.choice([0, 1, 3, 10]) if lr.random() < 0.1 else None
        if limit is not None:
            fq = f"{fq} LIMIT {limit}"
        con = duckdb.connect()
        con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
        try:
            cur = con.execute(dq)
            names = [d[0] for d in cur.description]
            expect = sorted(tuple(canon(x) for x in row) for row in cur.fetchall())
        except Exception as e:
            print(f"seed {seed}: duckdb error {e}\n  {dq}")
            continue
        for parts in (1, 2, 4):
            rows, err = run_freshet(fq, path, parts)
            if err is not None:
                refusals += 1
                print(f"seed {seed} p={parts} [{form}] ERROR: {err}\n  {fq}")
                break
            got = sorted(tuple(canon(row.get(n)) for n in names) for row in rows)
            if limit is not None:
                left = collections.Counter(expect)
                left.subtract(got)
                if len(got) != min(limit, len(expect)) or any(n < 0 for n in left.values()):
                    fails += 1
                    print(f"seed {seed} p={parts} [{form}] MISMATCH\n  {fq}\n  duck: {dq}\n  expected {min(limit, len(expect))} of {len(expect)} rows, got {len(got)}: {got[:3]}")
                    break
                continue
            if got != expect and form == "over":
                ex = subprocess.run([FRESHET, "query", "EXPLAIN " + fq, "--table", f"t={path},event_time=ts", "--partitions", str(parts)], capture_output=True, text=True).stdout
                if "WindowAggExec" in ex:
                    print(f"seed {seed} p={parts} [over] differs on DataFusion's window operator (ties?) {fq}")
                    break
            if got != expect and within_last_digit(expect, got):
                print(f"seed {seed} p={parts} [{form}] differs in a fifth significant digit (decimal AVG truncated?) {fq}")
                got = expect
            if got != expect:
                fails += 1
                print(f"seed {seed} p={parts} [{form}] MISMATCH\n  {fq}\n  duck: {dq}\n  expected {len(expect)} rows, got {len(got)}")
                missing = [x for x in expect if x not in got][:3]
                extra = [x for x in got if x not in expect][:3]
                print(f"  missing {missing}\n  extra   {extra}")
                break
        else:
            ok += 1
    print(f"cases {cases}: ok {ok}, mismatches {fails}, errors {refusals}")
    sys.exit(1 if fails or refusals else 0)


if __name__ == "__main__":
    main()
