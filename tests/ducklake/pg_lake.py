"""Puts the DuckLake fixture's catalog into PostgreSQL, through DuckDB.

Usage: python pg_lake.py CONNINFO SCHEMA SQLITE_CATALOG DATA_PATH

DuckDB 1.4.4 (ducklake and postgres_scanner extensions from PyPI, loaded from
site-packages, nothing downloaded) creates an empty DuckLake catalog in the
PostgreSQL schema SCHEMA (`METADATA_SCHEMA`), with DuckLake's own DDL (the
PostgreSQL column types: boolean flags, uuid, timestamptz). Every row of the
SQLite fixture catalog then replaces the new catalog's rows, table by table,
so that both catalogs describe the same lake (same ids, snapshots and files,
hence the same `expected.json`). `data_path` becomes the absolute DATA_PATH: a
PostgreSQL catalog has no folder to resolve a relative one against. Finally
DuckDB reads `s1.docs` back through the PostgreSQL catalog as a check.
"""
import glob
import os
import site
import sqlite3
import sys

import duckdb


def ext_path(pkg: str, name: str) -> str:
    roots = list(site.getsitepackages()) + [site.getusersitepackages()]
    for root in roots:
        pattern = os.path.join(root, pkg, "extensions", f"v{duckdb.__version__}", f"{name}.duckdb_extension")
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    sys.exit(f"no {pkg} extension for duckdb {duckdb.__version__} in {roots}")


def lit(v) -> str:
    """A PostgreSQL literal of unknown type, so that the column type decides
    ('1' becomes bigint, boolean or text as the column is)."""
    if v is None:
        return "NULL"
    return "'" + str(v).replace("'", "''") + "'"


def ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def main() -> None:
    conninfo, schema, catalog, data_path = sys.argv[1:5]
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    con.execute(f"LOAD '{ext_path('duckdb_extension_ducklake', 'ducklake')}'")
    con.execute(f"LOAD '{ext_path('duckdb_extension_postgres_scanner', 'postgres_scanner')}'")
    con.execute(f"ATTACH {lit(conninfo)} AS pg (TYPE postgres)")
    con.execute("CALL postgres_execute('pg', ?)", [f"CREATE SCHEMA IF NOT EXISTS {ident(schema)}"])
    con.execute(
        f"ATTACH {lit('ducklake:postgres:' + conninfo)} AS lake "
        f"(DATA_PATH {lit(data_path)}, METADATA_SCHEMA {lit(schema)})"
    )
    con.execute("DETACH lake")

    tables = [
        r[0]
        for r in con.execute(
            "SELECT table_name FROM postgres_query('pg', ?)",
            [
                "SELECT table_name::text AS table_name FROM information_schema.tables "
                f"WHERE table_schema = {lit(schema)} AND table_name LIKE 'ducklake%'"
            ],
        ).fetchall()
    ]
    assert len(tables) >= 20, tables
    src = sqlite3.connect(f"file:{catalog}?mode=ro", uri=True)
    in_sqlite = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    statements = []
    for table in sorted(tables):
        q = f"{ident(schema)}.{ident(table)}"
        statements.append(f"DELETE FROM {q}")
        if table not in in_sqlite:
            continue
        cur = src.execute(f"SELECT * FROM {ident(table)}")
        cols = ", ".join(ident(d[0]) for d in cur.description)
        rows = cur.fetchall()
        if rows:
            values = ", ".join("(" + ", ".join(lit(v) for v in row) + ")" for row in rows)
            statements.append(f"INSERT INTO {q} ({cols}) VALUES {values}")
    statements.append(
        f"UPDATE {ident(schema)}.ducklake_metadata SET value = {lit(data_path)} "
        "WHERE key = 'data_path' AND scope IS NULL"
    )
    con.execute("CALL postgres_execute('pg', ?)", ["BEGIN; " + "; ".join(statements) + "; COMMIT"])
    con.execute("DETACH pg")

    con.execute(f"ATTACH {lit('ducklake:postgres:' + conninfo)} AS lake (METADATA_SCHEMA {lit(schema)}, READ_ONLY)")
    n = con.execute("SELECT count(*) FROM lake.s1.docs").fetchone()[0]
    print(f"schema {schema}: {len(tables)} catalog tables, s1.docs has {n} rows")


if __name__ == "__main__":
    main()
