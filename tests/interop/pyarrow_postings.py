#!/usr/bin/env python3
"""Independent reader: checks an ivf_postings table written by parqivf using
only pyarrow's own view of the Parquet footers.

Usage: pyarrow_postings.py <table-folder>   (the folder holding manifest.json)

For every manifest entry it checks: the object's size and sha256 equal the
manifest; the footer's row count equals `rows`; the `cid` column is a required
INT32; every row group has exactly one CID (exact, equal min/max statistics,
no nulls), in non-decreasing order inside [min-cid, max-cid], starting at
min-cid and ending at max-cid; the vector column is FIXED_LEN_BYTE_ARRAY(dim*4)
PLAIN and uncompressed; the key-value metadata carries the format version and
dim; and the decoded cid values (a one-value dictionary) and rowids
(DELTA_BINARY_PACKED) agree with their statistics. Exits 0 when all
hold, 1 otherwise (printing each failure).

pyarrow (up to 26 at least) does not expose the footer's is_min_value_exact /
is_max_value_exact flags, so those two are read by a small Thrift compact
decoder below from the same footer bytes, independent of the Rust code.
"""
import hashlib
import json
import os
import sys

import pyarrow.parquet as pq

failures = []


class Compact:
    """Minimal Thrift compact-protocol reader: structs become {field_id: value}."""

    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def byte(self):
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self):
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return result

    def zigzag(self):
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, t):
        if t in (1, 2):  # bool inside a struct: the type carries the value
            return t == 1
        if t == 3:
            return self.byte()
        if t in (4, 5, 6):
            return self.zigzag()
        if t == 7:
            self.pos += 8
            return None
        if t == 8:
            n = self.varint()
            self.pos += n
            return self.buf[self.pos - n:self.pos]
        if t in (9, 10):
            head = self.byte()
            size, et = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if et in (1, 2):
                return [self.byte() == 1 for _ in range(size)]
            return [self.value(et) for _ in range(size)]
        if t == 11:
            size = self.varint()
            if size == 0:
                return {}
            kv = self.byte()
            return {self.value(kv >> 4): self.value(kv & 0x0F) for _ in range(size)}
        if t == 12:
            fields, last = {}, 0
            while True:
                head = self.byte()
                if head == 0:
                    return fields
                delta, ft = head >> 4, head & 0x0F
                last = last + delta if delta else self.zigzag()
                fields[last] = self.value(ft)
        raise ValueError(f"unknown thrift compact type {t}")


def exactness(data):
    """[(is_min_exact, is_max_exact)] of column 0..n per row group, from the raw footer."""
    footer_len = int.from_bytes(data[-8:-4], "little")
    meta = Compact(data[-8 - footer_len:-8]).value(12)
    out = []
    for rg in meta.get(4, []):
        cols = []
        for chunk in rg.get(1, []):
            stats = chunk.get(3, {}).get(12, {})
            cols.append((stats.get(8), stats.get(7)))
        out.append(cols)
    return out


def check(cond, msg):
    if not cond:
        failures.append(msg)


def main(folder):
    with open(os.path.join(folder, "manifest.json"), "rb") as f:
        manifest = json.load(f)
    check(manifest["format-version"] == 1, "format-version is not 1")
    check(sum(e["rows"] for e in manifest["files"]) == manifest["ntotal"], "rows do not sum to ntotal")
    for entry in manifest["files"]:
        path = os.path.join(folder, entry["path"])
        name = entry["path"]
        with open(path, "rb") as f:
            data = f.read()
        check(len(data) == entry["size"], f"{name}: size {len(data)} != {entry['size']}")
        digest = hashlib.sha256(data).hexdigest()
        check(digest == entry["sha256"], f"{name}: sha256 {digest} != {entry['sha256']}")

        pf = pq.ParquetFile(path)
        md = pf.metadata
        check(md.num_rows == entry["rows"], f"{name}: footer rows {md.num_rows} != {entry['rows']}")
        kv = {k.decode(): v.decode() for k, v in (md.metadata or {}).items()}
        check(kv.get("parqivf.format-version") == "1", f"{name}: format-version kv {kv.get('parqivf.format-version')}")
        dim = int(kv.get("parqivf.dim", "0"))
        schema = pf.schema
        names = [schema.column(i).name for i in range(len(schema))]
        cid_idx = names.index("cid")
        vec_idx = names.index("vector")
        cid_col = schema.column(cid_idx)
        check(cid_col.physical_type == "INT32", f"{name}: cid physical type {cid_col.physical_type}")
        check(cid_col.max_definition_level == 0, f"{name}: cid is not REQUIRED")
        vec_col = schema.column(vec_idx)
        check(vec_col.physical_type == "FIXED_LEN_BYTE_ARRAY", f"{name}: vector type {vec_col.physical_type}")
        check(vec_col.length == dim * 4, f"{name}: vector length {vec_col.length} != {dim}*4")

        exact = exactness(data)
        previous = None
        first = last = None
        for rg in range(md.num_row_groups):
            col = md.row_group(rg).column(cid_idx)
            st = col.statistics
            check(st is not None and st.has_min_max, f"{name}: rg {rg} has no cid min/max")
            if st is None or not st.has_min_max:
                continue
            check(exact[rg][cid_idx] == (True, True), f"{name}: rg {rg} cid stats exactness {exact[rg][cid_idx]}")
            check(st.null_count == 0, f"{name}: rg {rg} has {st.null_count} null cids")
            check(st.min == st.max, f"{name}: rg {rg} holds cids {st.min}..{st.max}")
            check(entry["min-cid"] <= st.min <= entry["max-cid"], f"{name}: rg {rg} cid {st.min} outside file range")
            check(previous is None or st.min >= previous, f"{name}: rg {rg} cid {st.min} after {previous}")
            previous = st.max
            first = st.min if first is None else first
            last = st.max
            values = set(pf.read_row_group(rg, columns=["cid"]).column("cid").to_pylist())
            check(values == {st.min}, f"{name}: rg {rg} decoded cids {sorted(values)} vs stats {st.min}")
            rowid_idx = names.index("rowid")
            rowids = pf.read_row_group(rg, columns=["rowid"]).column("rowid").to_pylist()
            rst = md.row_group(rg).column(rowid_idx).statistics
            check(len(rowids) == md.row_group(rg).num_rows, f"{name}: rg {rg} decoded {len(rowids)} rowids")
            check(rst is not None and rst.has_min_max and (rst.min, rst.max) == (min(rowids), max(rowids)),
                  f"{name}: rg {rg} rowid stats {rst} vs decoded {min(rowids)}..{max(rowids)}")
            vec = md.row_group(rg).column(vec_idx)
            check(vec.compression == "UNCOMPRESSED", f"{name}: rg {rg} vector compression {vec.compression}")
            check(not vec.has_dictionary_page, f"{name}: rg {rg} vector has a dictionary page")
            check("PLAIN" in vec.encodings, f"{name}: rg {rg} vector encodings {vec.encodings}")
        check(first == entry["min-cid"], f"{name}: first cid {first} != min-cid {entry['min-cid']}")
        check(last == entry["max-cid"], f"{name}: last cid {last} != max-cid {entry['max-cid']}")

    for msg in failures:
        print(msg)
    print(f"{folder}: {len(manifest['files'])} files checked by pyarrow, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
