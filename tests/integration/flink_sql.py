"""Flink SQL as a third-party consumer of a LogStore log: run by the ``flink`` environment's Python.

No project code: PyFlink and Flink's Kafka SQL connector only (the jars are the arguments). One
streaming TableEnvironment (one Flink JVM) answers every request of a test session. A request is one
JSON line on stdin, ``{"config": {...}, "statements": [DDL, ...], "query": "SELECT ..."}``; the answer
one line on stdout, after :data:`ANSWER`: ``{"rows": [[...], ...]}``, the query's changelog folded into
the rows it leaves (what a materialized view of it holds), or ``{"error": "..."}``. The query's sources
must be bounded (``'scan.bounded.mode'``): its job then finishes.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

ANSWER = "FLINK-ANSWER "


def fold(result: Any) -> list[list[Any]]:
    """The rows a changelog leaves: each addition (+I, +U) adds its row, each retraction (-U, -D)
    removes an equal row that is there (a retraction of a row that is not is an error)."""
    from pyflink.common import RowKind

    rows: Counter[str] = Counter()
    with result.collect() as changes:
        for change in changes:
            row = json.dumps(list(change), default=str)
            if change.get_row_kind() in (RowKind.INSERT, RowKind.UPDATE_AFTER):
                rows[row] += 1
            elif rows[row] > 0:
                rows[row] -= 1
            else:
                raise ValueError(f"{change.get_row_kind()} of a row the view does not hold: {row}")
    return [json.loads(row) for row, count in sorted(rows.items()) for _ in range(count)]


def main(jars: list[str]) -> int:
    from pyflink.table import EnvironmentSettings, TableEnvironment

    tables = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = tables.get_config()
    config.set("pipeline.jars", ";".join(f"file://{jar}" for jar in jars))
    config.set("parallelism.default", "1")
    print(ANSWER + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            for key, value in request.get("config", {}).items():
                config.set(key, value)
            for statement in request.get("statements", []):
                tables.execute_sql(statement)
            answer: dict[str, Any] = {"rows": fold(tables.execute_sql(request["query"]))}
        except Exception as exc:  # the test shows it; the JVM stays up for the next request
            answer = {"error": f"{type(exc).__name__}: {str(exc)[:4000]}"}
        print(ANSWER + json.dumps(answer, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
