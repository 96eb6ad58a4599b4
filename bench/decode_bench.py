"""Decoding log values of a table with decimal and timestamp columns, before and after, in one run.

    .venv/bin/python -m bench.decode_bench --records 200000 --before main

The values are what the Spark produce writes (``to_json``: decimals as JSON numbers with all their
digits, timestamps with microseconds). Each path runs in a fresh process on the current code and on
``--before`` (unpacked with ``git archive``), over the same values:

- ``bulk``: ``codec.decode_values_bulk`` in chunks of 50,000 (what ``LogReader.iterate_batches`` does);
- ``per_record``: ``decode_value`` + ``typed_row`` one by one (``LogReader.iterate``, ``follow``);
- ``json_lines``: the bulk rows written as JSON lines (``run_read``'s output).

Reported: values per second (best of ``--repeat``), and how many values came back different from the
exact input (a decoded value is compared with the one written, column by column).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TYPES = {
    "id": "long",
    "name": "string",
    "price": "decimal(38, 18)",
    "amount": "decimal(12, 2)",
    "total": "decimal(38, 0)",
    "at": "timestamptz",
    "local_at": "timestamp",
    "ratio": "double",
}
CHUNK = 50_000


def rows(count: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    epoch = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    out = []
    for i in range(count):
        at = epoch + dt.timedelta(microseconds=rng.randrange(10**15))
        out.append(
            {
                "id": i,
                "name": f"customer-{i}",
                "price": Decimal(f"{rng.randrange(-(10**38) + 1, 10**38)}E-18"),  # scaleb would round
                "amount": Decimal(f"{rng.randrange(-(10**12) + 1, 10**12)}E-2"),
                "total": Decimal(rng.randrange(-(10**38) + 1, 10**38)),
                "at": at,
                "local_at": at.replace(tzinfo=None),
                "ratio": rng.random() * 1000,
            }
        )
    return out


def spark_value(row: dict[str, Any]) -> bytes:
    """The record value as Spark's ``to_json`` writes it (decimals as bare numbers)."""
    parts = []
    for name, value in row.items():
        if isinstance(value, Decimal):
            text = str(value)
        elif isinstance(value, dt.datetime):
            text = json.dumps(
                value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                if value.tzinfo
                else value.strftime("%Y-%m-%dT%H:%M:%S.%f")
            )
        else:
            text = json.dumps(value)
        parts.append(f'"{name}":{text}')
    return ('{"kind":"+I","row":{' + ",".join(parts) + "}}").encode()


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One path on the code on ``sys.path``: values per second and values that came back different."""
    from airflow_logstore.core import codec

    values = [line.rstrip(b"\n") for line in Path(spec["values"]).read_bytes().splitlines()]
    expected = rows(len(values))
    best = float("inf")
    decoded: list[dict[str, Any]] = []
    for _ in range(spec["repeat"]):
        started = time.perf_counter()
        if spec["what"] == "per_record":
            decoded = []
            for value in values:
                _, raw = codec.decode_value(value)
                decoded.append(codec.typed_row(raw, TYPES))
        else:
            tables = [
                codec.decode_values_bulk(values[i : i + CHUNK], TYPES).rows
                for i in range(0, len(values), CHUNK)
            ]
            if spec["what"] == "json_lines":
                from airflow_logstore.read.jsonlines import json_lines

                for table in tables:
                    json_lines(table)
            decoded = [row for table in tables for row in table.to_pylist()] if spec["what"] == "bulk" else []
        best = min(best, time.perf_counter() - started)
    wrong = (
        sum(
            1
            for got, want in zip(decoded, expected, strict=True)
            for name in TYPES
            if got[name] != want[name]
        )
        if decoded
        else None
    )
    return {
        **spec,
        "code": str(Path(codec.__file__).parents[2]),
        "values_per_s": round(len(values) / best),
        "values_different": wrong,
    }


def unpack(ref: str) -> Path:
    """The package at git ``ref``, unpacked in a temporary folder."""
    folder = Path(tempfile.mkdtemp(prefix="decode-bench-"))
    archive = folder / "code.tar"
    subprocess.run(["git", "archive", "-o", str(archive), ref, "airflow_logstore"], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--before", default="main")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", default=None)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return
    work = Path(tempfile.mkdtemp(prefix="decode-bench-values-"))
    values = work / "values.jsonl"
    values.write_bytes(b"\n".join(spark_value(row) for row in rows(args.records)) + b"\n")
    results = []
    before = unpack(args.before)
    for what in ("bulk", "per_record", "json_lines"):
        for version, root in (("before", before), ("after", ROOT)):
            spec = {"what": what, "version": version, "values": str(values), "repeat": args.repeat}
            done = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(root)},
                cwd=str(work),
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"{spec} failed: {done.stderr[-3000:]}")
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps({k: v for k, v in results[-1].items() if k != "values"}), flush=True)
    shutil.rmtree(before, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"records": args.records, "load": os.getloadavg(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
