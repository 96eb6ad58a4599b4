"""A Spark application the source's restart tests SIGKILL: ``logstore`` streams into sinks that record.

    python tests/integration/stream_driver.py --table NS.T --root DIR --queries log,hybrid,eventual

Each query ``q`` reads the table with ``spark.readStream.format("logstore")`` (see ``QUERIES``), with its
checkpoint in ``DIR/q/checkpoint``, into a ``foreachBatch`` sink that writes every delivery of micro-batch
``b`` to ``DIR/q/sink/<b>.<n>.jsonl`` (``n``: the how-many-th delivery of ``b``; a file appears whole, by
rename) and then reaches the pause point ``sink:written`` (a kill there: delivered, not committed). The
application starts the queries one after the other, writes ``DIR/started`` once every query is under
way (a test kills it only then: every query's restart is a restart), stops them when ``DIR/stop``
exists, and exits 1 (``DIR/q/error.txt``) when a query fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

#: The streams the tests run: options of each query (the table comes from ``--table``).
QUERIES: dict[str, dict[str, str]] = {
    "log": {"mode": "log", "consistency": "consistent", "maxRecordsPerTrigger": "15"},
    "hybrid": {"mode": "hybrid", "consistency": "consistent", "maxRecordsPerTrigger": "15"},
    "eventual": {"mode": "log", "consistency": "eventual"},
}


def sink_for(folder: Path) -> Any:
    from airflow_logstore.pause import pause_point

    folder.mkdir(parents=True, exist_ok=True)

    def sink(frame: Any, batch_id: int) -> None:
        rows = [row.asDict() for row in frame.collect()]
        delivery = len(list(folder.glob(f"{batch_id}.*.jsonl")))
        part = folder / f".{batch_id}.{delivery}.tmp"
        part.write_text("".join(json.dumps(row, default=str, sort_keys=True) + "\n" for row in rows))
        os.replace(part, folder / f"{batch_id}.{delivery}.jsonl")
        pause_point("sink:written")

    return sink


#: A query's status once its source answered its first offsets (its Python process is up).
PAST_FIRST_OFFSETS = ("Processing new data", "Waiting for data to arrive", "Waiting for next trigger")


def under_way(query: Any, paused: set[str]) -> bool:
    """Whether ``query``'s source process is up: it made progress, failed, is past its first offsets,
    or stopped at a test's pause point inside them (``source:offsets-chosen``): a process that no
    earlier query's was (``paused``: the pids seen at pause points so far) wrote its pid there."""
    if query.lastProgress is not None or query.exception() is not None:
        return True
    message = str(query.status["message"])
    if message in PAST_FIRST_OFFSETS:
        return True
    folder = os.environ.get("LOGSTORE_PAUSE_DIR")
    if not message.startswith("Getting offsets") or not folder:
        return False
    for reached in Path(folder).glob("*.reached"):
        pid = reached.read_text().strip()  # empty while it is being written: read again next time
        if pid and pid not in paused:
            paused.add(pid)
            return True
    return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--queries", default=",".join(QUERIES))
    parser.add_argument("--trigger-ms", type=int, default=100)
    parser.add_argument("--hybrid-snapshot", type=int, default=None, help="the hybrid stream's snapshot")
    args = parser.parse_args()

    from airflow_logstore.read.spark_source import register
    from airflow_logstore.spark.session import build_spark_session

    spark = build_spark_session("logstore-stream-driver")
    register(spark)  # spark.read.format("logstore")
    queries, paused = {}, set[str]()
    for name in args.queries.split(","):
        folder = args.root / name
        options = dict(QUERIES[name])
        if name == "hybrid" and args.hybrid_snapshot is not None:
            options["startingPosition"] = f"snapshot:{args.hybrid_snapshot}"
        queries[name] = (
            spark.readStream.format("logstore")
            .option("table", args.table)
            .options(**options)
            .load()
            .writeStream.queryName(name)
            .foreachBatch(sink_for(folder / "sink"))
            .option("checkpointLocation", str(folder / "checkpoint"))
            .trigger(processingTime=f"{args.trigger_ms} milliseconds")
            .start()
        )
        # one query at a time: each starts a Python process for its source, which Spark gives 10 s to
        # connect back, and three at once on a busy 2-core machine can miss that
        while not under_way(queries[name], paused):
            time.sleep(0.1)
    (args.root / "started").touch()
    stop = args.root / "stop"
    while not stop.exists():
        for name, query in queries.items():
            if query.exception() is not None:
                (args.root / name / "error.txt").write_text(str(query.exception()))
                return 1
        time.sleep(0.1)  # waits for the test's stop file; lines nothing up
    for query in queries.values():
        query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
