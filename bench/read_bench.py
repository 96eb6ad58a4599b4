"""Log reads before and after the bulk reader, side by side in one run: records/s and memory.

    LOGSTORE_CACHE=$PWD/.cache .venv/bin/python -m bench.read_bench --records 1000000,4000000

A synthetic writer fills one table per size with the real record format: batches of 200,000 records,
each produced by 8 task attempts (each its own header set) over 3 partitions, every batch committed in
the ledger (offsets, task attempts) and a dead attempt's copy of 5 % of each batch (redundant for a
consistent reader), then the watermark at the log end. Each read runs in a fresh process on either the
current code or a git worktree of ``--before`` (default: the commit before the bulk reader), so both
read the same topics with the same broker:

- ``read``: the reader's stream, no output (before: ``LogReader.iterate``, one record at a time; after:
  ``LogReader.iterate_batches``, Arrow tables of up to 50,000 records);
- ``run_read``: what the read operator and ``logstore read`` do, JSON lines to /dev/null.

Peak RSS is the reading process's (``ru_maxrss``); read memory is the RSS growth during the read
(sampled every 20 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BATCH = 200_000
TASKS = 8
DEAD_SHARE = 0.05


def produce(handle: Any, records: int) -> dict[str, Any]:
    """Fill ``handle``'s log with ``records`` committed records plus dead copies; ledger and watermark."""
    from airflow_logstore.core import control
    from airflow_logstore.core.codec import RecordMeta, encode_headers
    from airflow_logstore.core.summary import CommitInfo
    from airflow_logstore.log import kafka_client

    config = handle.kafka_config()
    topic = handle.config().topic
    ctl = handle.control()
    producer = kafka_client.producer(config, **{"linger.ms": 50, "batch.size": 1_000_000})
    cons = kafka_client.consumer(config)

    def ends() -> dict[int, int]:
        return {p: high for p, (_, high) in kafka_client.partition_offsets(cons, topic, 3).items()}

    def send(headers: list[Any], first_id: int, count: int) -> None:
        for i in range(first_id, first_id + count):
            value = b'{"kind":"+I","row":{"id":%d,"name":"name-%d","amount":%d}}' % (i, i, i * 7)
            while True:
                try:
                    producer.produce(topic, key=b"[%d]" % i, value=value, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.05)

    sent = dead = 0
    batch_id = 0
    while sent < records:
        batch_id += 1
        size = min(BATCH, records - sent)
        dead_epoch = ctl.claim_epoch("bench")
        dead_count = int(size * DEAD_SHARE)
        send(encode_headers(RecordMeta("bench", dead_epoch, batch_id, "0.0")), sent, dead_count)
        producer.flush(120)
        dead += dead_count
        epoch = ctl.claim_epoch("bench")
        before = ends()
        per_task = -(-size // TASKS)
        tasks = []
        for task in range(TASKS):
            tag = f"{task}.{batch_id * TASKS + task}"
            tasks.append(tag)
            count = min(per_task, size - task * per_task)
            send(encode_headers(RecordMeta("bench", epoch, batch_id, tag)), sent + task * per_task, count)
        producer.flush(120)
        after = ends()
        offsets = {p: (before[p], after[p] - 1) for p in after if after[p] > before[p]}
        commit = CommitInfo(
            "bench", batch_id, epoch, offsets=offsets, tasks=frozenset(tasks), record_count=size
        )
        ctl.record_commit(commit.to_json(), "bench", batch_id)
        sent += size
    ctl.append(control.K_WATERMARK, {"offsets": {str(p): end - 1 for p, end in ends().items()}})
    cons.close()
    return {"committed": sent, "dead_copies": dead, "batches": batch_id}


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One read in this process (the code on ``sys.path``: the checkout or the before worktree)."""
    import resource
    import threading

    import psutil

    from airflow_logstore.read.reader import LogReader, run_read
    from airflow_logstore.table.tables import LogStoreTable

    me = psutil.Process(os.getpid())
    baseline = me.memory_info().rss
    peak = [baseline]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            peak[0] = max(peak[0], me.memory_info().rss)

    handle = LogStoreTable.open(spec["table"])
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    started = time.perf_counter()
    if spec["what"] == "run_read":
        with open(os.devnull, "w", encoding="utf-8") as sink:
            scanner = {"scanner": spec["scanner"]} if "scanner" in spec else {}
            summary = run_read(handle, mode="log", consistency=spec["consistency"], output=sink, **scanner)
        returned, scanned = summary["records"], summary["report"]["scanned"]
    else:
        scanner = {"scanner": spec["scanner"]} if "scanner" in spec else {}
        reader = LogReader(handle, consistency=spec["consistency"], **scanner)
        report = reader.new_report() if hasattr(reader, "new_report") else None
        if hasattr(reader, "iterate_batches"):
            returned = sum(t.num_rows for t in reader.iterate_batches("earliest", report=report))
        else:
            from airflow_logstore.read.reader import ReadReport

            report = ReadReport(spec["table"], "log", spec["consistency"], "all-kinds")
            returned = sum(1 for _ in reader.iterate("earliest", report=report))
        scanned = report.scanned if report is not None else 0
    seconds = time.perf_counter() - started
    stop.set()
    thread.join()
    return {
        **spec,
        "seconds": round(seconds, 2),
        "scanned": scanned,
        "returned": returned,
        "records_per_s": round(scanned / seconds),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "read_memory_mb": round((peak[0] - baseline) / 2**20),
    }


def run_child(code_root: Path, env: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    environ = {**os.environ, **env, "PYTHONPATH": str(code_root)}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=str(code_root),
        timeout=1200,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"read failed ({spec}): {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def before_ref() -> str:
    """The commit before the bulk reader was added."""
    added = subprocess.run(
        ["git", "log", "--format=%H", "--diff-filter=A", "--", "airflow_logstore/read/batches.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return f"{added[-1]}^" if added else "HEAD"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", default="250000,1000000,4000000")
    parser.add_argument("--before", default=None, help="git ref of the code to compare with")
    parser.add_argument(
        "--before-run-read-up-to", type=int, default=1_000_000, help="largest size of run_read before"
    )
    parser.add_argument(
        "--scanners",
        default=None,
        help="e.g. librdkafka,jvm: compare these scanners of the current code (instead of before/after)",
    )
    parser.add_argument("--child", default=None)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return

    from bench.common import machine, save
    from logstore_dev.testing.environment import logstore_environment
    from logstore_dev.testing.tables import make_table

    sizes = [int(s) for s in args.records.split(",")]
    scanners = args.scanners.split(",") if args.scanners else []
    ref = "HEAD" if scanners else args.before or before_ref()
    worktree = Path(tempfile.mkdtemp(prefix="read-bench-before-"))
    if not scanners:
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), ref], cwd=ROOT, check=True)
    versions = [(f"scanner {s}", ROOT, {"scanner": s}) for s in scanners] or [
        ("before", worktree, {}),
        ("after", ROOT, {}),
    ]
    results: list[dict[str, Any]] = []
    try:
        with logstore_environment() as env:
            tables = {}
            for size in sizes:
                handle = make_table(env, prefix=f"read{size}")
                started = time.perf_counter()
                filled = produce(handle, size)
                print(f"table {handle.name}: {filled} in {time.perf_counter() - started:.0f}s", flush=True)
                tables[size] = (str(handle.name), filled)
            for size in sizes:
                for what in ("read", "run_read"):
                    # the old name of consistent: the --before worktree's code takes only it
                    for consistency in ("eventual", "transactional"):
                        if what == "run_read" and consistency == "transactional":
                            continue
                        for version, root, extra in versions:
                            if (
                                version == "before"
                                and what == "run_read"
                                and size > args.before_run_read_up_to
                            ):
                                continue  # it holds every record about three times
                            spec = {
                                "table": tables[size][0],
                                "records": size,
                                "what": what,
                                "consistency": consistency,
                                "version": version,
                                **extra,
                            }
                            results.append(run_child(root, env.env, spec))
                            print(json.dumps(results[-1]), flush=True)
    finally:
        if not scanners:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False)
    payload = {"machine": machine(), "before": ref, "load": os.getloadavg(), "results": results}
    save("read", payload)
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
