"""The ``logstore`` Spark source against the Python reader, side by side in one run.

    LOGSTORE_CACHE=$PWD/.cache .venv/bin/python -m bench.spark_source_bench --records 1000000 --batches 200

1. Throughput on one table of ``--records`` committed records (the synthetic writer of ``read_bench``:
   batches of 200,000 records from 8 task attempts over 3 partitions, a dead attempt's copy of 5 % of
   each, the watermark at the log end), each read after the other in this process, in one Spark session
   (``local[2]``), records/s = records read / wall seconds:

   - Python reader, batch: ``LogReader.iterate_batches`` (consistent; the JVM scan at this size);
   - Spark source, batch: ``spark.read.format("logstore")`` into Spark's ``noop`` sink (consistent, as
     planned and with ``minPartitions`` = the log's partitions; eventual);

   these four alternate for ``--rounds`` rounds, and each one's median is reported (with every run's time);
   - Python follower: ``follow()`` (consistent) until every committed record came;
   - Spark source, stream: ``spark.readStream.format("logstore")`` (consistent) into the ``noop`` sink,
     one micro-batch, and micro-batches of ``maxRecordsPerTrigger`` 100,000, from the query's start to
     the progress that holds the last record.

2. Latency, ``--batches`` small batches (10 records, keyed, 3 partitions) on another table: each one's
   records produced and its commit put in the ledger, then ``publish_visible_offsets`` moves the
   watermark; the time from the end of that publish to the record reaching the sink: a consistent
   stream with a 100 ms trigger into ``foreachBatch`` (the time the micro-batch's rows are in the
   driver), and a consistent Python follower beside it. p50/p99/max per batch.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

from bench.latency_bench import summarize
from bench.read_bench import produce

STREAM_LIMIT = 100_000


def _rate(records: int, seconds: float) -> dict[str, Any]:
    return {"records": records, "seconds": round(seconds, 2), "records_per_s": round(records / seconds)}


def python_batch(handle: Any) -> dict[str, Any]:
    from airflow_logstore.read.reader import LogReader

    started = time.perf_counter()
    reader = LogReader(handle, consistency="consistent")
    report = reader.new_report()
    returned = sum(table.num_rows for table in reader.iterate_batches("earliest", report=report))
    return {**_rate(returned, time.perf_counter() - started), "scanner": report.scanner}


def spark_batch(spark: Any, table: str, consistency: str, **options: str) -> dict[str, Any]:
    started = time.perf_counter()
    frame = spark.read.format("logstore").options(table=table, consistency=consistency, **options).load()
    frame.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    count = spark.read.format("logstore").options(table=table, consistency=consistency).load().count()
    return {**_rate(count, seconds), "tasks": frame.rdd.getNumPartitions()}


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median time, with every run's seconds (the reads alternate, round after round)."""
    ordered = sorted(runs, key=lambda run: run["seconds"])
    return {**ordered[len(ordered) // 2], "runs_seconds": [run["seconds"] for run in runs]}


def batch_reads(spark: Any, handle: Any, rounds: int) -> dict[str, dict[str, Any]]:
    """The batch reads, one after the other in each of ``rounds`` rounds: the median of each."""
    table, partitions = str(handle.name), str(handle.config().partitions)
    reads = {
        "python reader, batch (consistent)": lambda: python_batch(handle),
        "spark source, batch (consistent)": lambda: spark_batch(spark, table, "consistent"),
        "spark source, batch (consistent), a task per partition": lambda: spark_batch(
            spark, table, "consistent", minPartitions=partitions
        ),
        "spark source, batch (eventual)": lambda: spark_batch(spark, table, "eventual"),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in reads}
    for _ in range(rounds):
        for name, read in reads.items():
            runs[name].append(read())
    return {name: median_of(found) for name, found in runs.items()}


def python_follower(handle: Any, expected: int) -> dict[str, Any]:
    from airflow_logstore.read.follow import follow
    from airflow_logstore.read.reader import LogReader

    class _Done:
        def __init__(self) -> None:
            self.count = 0

        def is_set(self) -> bool:
            return self.count >= expected

    done = _Done()
    started = time.perf_counter()
    for _ in follow(LogReader(handle, consistency="consistent"), "earliest", stop=done):
        done.count += 1
    return _rate(done.count, time.perf_counter() - started)


def spark_stream(spark: Any, table: str, expected: int, folder: str, limit: int | None) -> dict[str, Any]:
    options = {"table": table, "consistency": "consistent"}
    if limit:
        options["maxRecordsPerTrigger"] = str(limit)
    started = time.perf_counter()
    query = (
        spark.readStream.format("logstore")
        .options(**options)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", folder)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    seen = batches = 0
    last = None
    while seen < expected:
        progress = query.recentProgress
        fresh = [p for p in progress if p["batchId"] != last and (last is None or p["batchId"] > last)]
        for entry in fresh:
            seen += entry["numInputRows"]
            batches += 1 if entry["numInputRows"] else 0
            last = entry["batchId"]
        if query.exception() is not None:
            raise RuntimeError(query.exception())
        time.sleep(0.05)
    seconds = time.perf_counter() - started
    query.stop()
    return {**_rate(seen, seconds), "micro_batches": batches, "max_records_per_trigger": limit}


def latency(spark: Any, handle: Any, batches: int, folder: str) -> dict[str, Any]:
    """Publish → sink, per batch, for the Spark stream and the Python follower."""
    from airflow_logstore.core.codec import RecordMeta, encode_headers
    from airflow_logstore.core.summary import CommitInfo
    from airflow_logstore.log import kafka_client
    from airflow_logstore.publish.publisher import publish_visible_offsets
    from airflow_logstore.read.follow import follow
    from airflow_logstore.read.reader import LogReader

    spark_seen: dict[int, float] = {}
    python_seen: dict[int, float] = {}

    def sink(frame: Any, batch_id: int) -> None:
        rows = frame.select("_batch_id").distinct().collect()
        now = time.time()
        for row in rows:
            spark_seen.setdefault(row[0], now)

    query = (
        spark.readStream.format("logstore")
        .options(table=str(handle.name), consistency="consistent")
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", folder)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    stop = threading.Event()

    def run_follower() -> None:
        for record in follow(LogReader(handle, consistency="consistent"), "earliest", stop=stop):
            python_seen.setdefault(record.meta.batch_id, time.time())

    follower = threading.Thread(target=run_follower, daemon=True)
    follower.start()
    config, topic, ctl = handle.kafka_config(), handle.config().topic, handle.control()
    producer = kafka_client.producer(config)
    cons = kafka_client.consumer(config)
    published: dict[int, float] = {}
    epoch = ctl.claim_epoch("bench")
    try:
        for batch in range(1, batches + 1):
            before = {p: h for p, (_, h) in kafka_client.partition_offsets(cons, topic, 3).items()}
            headers = encode_headers(RecordMeta("bench", epoch, batch, "0.1"))
            for i in range(10):
                key = batch * 10 + i
                value = b'{"kind":"+I","row":{"id":%d,"name":"n","amount":%d}}' % (key, batch)
                producer.produce(topic, key=b"[%d]" % key, value=value, headers=headers)
            producer.flush(30)
            after = {p: h for p, (_, h) in kafka_client.partition_offsets(cons, topic, 3).items()}
            spans = {p: (before[p], after[p] - 1) for p in after if after[p] > before[p]}
            commit = CommitInfo(
                "bench", batch, epoch, offsets=spans, tasks=frozenset({"0.1"}), record_count=10
            )
            ctl.record_commit(commit.to_json(), "bench", batch)
            publish_visible_offsets(handle)
            published[batch] = time.time()
            deadline = time.time() + 30
            while (batch not in spark_seen or batch not in python_seen) and time.time() < deadline:
                time.sleep(0.005)
    finally:
        stop.set()
        query.stop()
        follower.join(10)
        cons.close()
    spark_latency = [spark_seen[b] - published[b] for b in published if b in spark_seen]
    python_latency = [python_seen[b] - published[b] for b in published if b in python_seen]
    return {
        "batches": batches,
        "spark_stream_100ms_trigger": summarize(spark_latency),
        "python_follower": summarize(python_latency),
        "missing": {"spark": batches - len(spark_latency), "python": batches - len(python_latency)},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--skip", default="", help="throughput or latency")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the batch reads (medians)")
    args = parser.parse_args()

    from airflow_logstore.read.spark_source import register
    from airflow_logstore.spark.session import build_spark_session
    from bench.common import machine, save
    from logstore_dev.testing.environment import logstore_environment
    from logstore_dev.testing.tables import make_table

    results: dict[str, Any] = {"machine": machine(), "load_before": os.getloadavg()}
    with logstore_environment() as env:
        spark = build_spark_session("bench-spark-source")
        register(spark)  # spark.read.format("logstore")
        work = env.scratch("spark-source-bench")
        if "throughput" not in args.skip:
            handle = make_table(env, prefix="srcbench")
            filled = produce(handle, args.records)
            table, committed = str(handle.name), filled["committed"]
            spark_batch(spark, table, "consistent")  # warm-up: Python workers, imports
            runs = {
                **batch_reads(spark, handle, args.rounds),
                "python follower (consistent)": python_follower(handle, committed),
                "spark source, stream (consistent), one micro-batch": spark_stream(
                    spark, table, committed, str(work / "one"), None
                ),
                f"spark source, stream (consistent), {STREAM_LIMIT} per micro-batch": spark_stream(
                    spark, table, committed, str(work / "bounded"), STREAM_LIMIT
                ),
            }
            for name, result in runs.items():
                print(f"{name}: {json.dumps(result)}", flush=True)
            results["throughput"] = {"table": filled, "runs": runs}
        if "latency" not in args.skip:
            handle = make_table(env, prefix="srclatency")
            results["latency"] = latency(spark, handle, args.batches, str(work / "latency"))
            print(json.dumps(results["latency"]), flush=True)
        spark.stop()
    results["load_after"] = os.getloadavg()
    save("spark_source", results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
