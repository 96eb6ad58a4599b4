"""The Iceberg side: catalogs, schemas, LogStore tables and their snapshots.

- ``catalog``: the catalog spec (SQLite, PostgreSQL, REST; local folder or S3) and its secrets.
- ``schema``: a short DDL to an Iceberg schema and back.
- ``tables``: ``LogStoreTable`` (the handle: an Iceberg table whose properties carry the LogStore
  settings), creating, opening and showing tables.
- ``snapshots``: which snapshot committed a batch.
- ``discovery``: the LogStore tables of a catalog.
- ``reports``: job failure reports and results, written with the table's own storage.
- ``staged_commit``: a batch commit as a compare-and-set on ``main``: the attempt's staging branch, its
  fence tag, and fencing an older epoch's attempts.
- ``commit_retry``: running an Iceberg commit again when it lost a race with another commit.
"""
