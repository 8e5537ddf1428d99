#!/usr/bin/env python3
"""Independent readers of the code column and the page index (issue 12).

Usage: codes_readers.py <postings-file> <code-bytes> <rows>

pyarrow: the `code` column is FIXED_LEN_BYTE_ARRAY(code-bytes), REQUIRED,
PLAIN and uncompressed; every row group's `vector` chunk has an offset index
(page index); the whole file reads with page CRC verification on.
DuckDB: reads `code` as BLOB of code-bytes bytes for every row, with the
file's row count. Prints one summary line; exits 1 on any failure."""
import sys

import duckdb
import pyarrow.parquet as pq

path, width, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
failures = []
f = pq.ParquetFile(path)
names = [f.schema.column(i).name for i in range(f.metadata.num_columns)]
code = names.index("code")
vector = names.index("vector")
col = f.schema.column(code)
if col.physical_type != "FIXED_LEN_BYTE_ARRAY" or col.length != width or col.max_definition_level != 0:
    failures.append(f"code column is {col.physical_type}({col.length}) def {col.max_definition_level}")
for rg in range(f.metadata.num_row_groups):
    c = f.metadata.row_group(rg).column(code)
    if c.compression != "UNCOMPRESSED" or "PLAIN" not in c.encodings:
        failures.append(f"row group {rg}: code is {c.compression} {c.encodings}")
    v = f.metadata.row_group(rg).column(vector)
    if not v.has_offset_index:
        failures.append(f"row group {rg}: vector has no offset index")
table = pq.read_table(path, page_checksum_verification=True)
if table.num_rows != rows or table.column("code").type.byte_width != width:
    failures.append(f"pyarrow read {table.num_rows} rows, code {table.column('code').type}")
((n, lo, hi),) = duckdb.sql(
    f"SELECT count(*), min(octet_length(code)), max(octet_length(code)) FROM read_parquet('{path}')"
).fetchall()
if (n, lo, hi) != (rows, width, width):
    failures.append(f"duckdb read {n} rows, code lengths {lo}..{hi}")
for failure in failures:
    print("FAIL", failure)
print(f"code column and page index read by pyarrow and duckdb, {len(failures)} failures")
sys.exit(1 if failures else 0)
