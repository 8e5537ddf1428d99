#!/usr/bin/env python3
"""Independent evaluations of payload filters (src/filter).

Usage: filter_eval.py <parquet-file> <cases-json>

<cases-json> is a JSON list of {"name", "sql", "pyarrow"}: "pyarrow" is a
pyarrow.compute expression (evaluated with `pc`, `pa`, `datetime` in scope)
meaning the same as the SQL `WHERE` text "sql". For every case the script
reads the file with pyarrow and selects the rows whose expression is TRUE
(NULL and FALSE are both dropped), and, when duckdb imports, runs
`SELECT rn FROM read_parquet(?) WHERE <sql>`. It prints one JSON object:
{"rows": N, "pyarrow": {name: [rn, ...]}, "duckdb": {name: [rn, ...]} or
null}, row numbers sorted."""
import datetime
import json
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

try:
    import duckdb
except ImportError:
    duckdb = None

path, cases = sys.argv[1], json.loads(sys.argv[2])
table = pq.read_table(path)
scope = {"pc": pc, "pa": pa, "datetime": datetime}

by_pyarrow = {}
for case in cases:
    expression = eval(case["pyarrow"], scope)  # noqa: S307 - test-defined text
    selected = table.filter(expression).column("rn").to_pylist()
    by_pyarrow[case["name"]] = sorted(selected)

by_duckdb = None
if duckdb is not None:
    con = duckdb.connect()
    # Timestamp literals without an offset are UTC, as in the filter language.
    con.execute("SET TimeZone = 'UTC'")
    by_duckdb = {}
    for case in cases:
        result = con.execute(
            f"SELECT rn FROM read_parquet(?) WHERE {case['sql']} ORDER BY rn", [path]
        ).fetchall()
        by_duckdb[case["name"]] = [row[0] for row in result]

print(json.dumps({"rows": table.num_rows, "pyarrow": by_pyarrow, "duckdb": by_duckdb}))
