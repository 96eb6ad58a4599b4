"""The JVM log scan (``airflow_logstore/log/java/LogScan.java``) on the real broker: which records it sends,
the offset ranges its frames cover, header sets, null keys and values, and its failures."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from airflow_logstore.core.codec import RecordMeta, encode_headers
from airflow_logstore.exceptions import KafkaUnavailableError, ServiceError
from airflow_logstore.log import jvm_scan, kafka_client


@pytest.fixture(autouse=True, scope="module")
def _kafka_client_jar() -> None:
    """The scan takes the Kafka client of the Spark jars (downloaded once, as the Spark tests do)."""
    from airflow_logstore.jars import spark_jars

    spark_jars()


A = encode_headers(RecordMeta("w", 1, 1, "0.0"))
B = encode_headers(RecordMeta("w", 1, 2, "0.0"))
RENAMED = [(f"{name}.x", value) for name, value in A]  # A's values under other names: another set


def _fill(env: Any, topic: str) -> dict[str, Any]:
    config = {"bootstrap.servers": env.bootstrap}
    kafka_client.ensure_topic(config, topic, partitions=2, replication_factor=1, topic_configs={})
    prod = kafka_client.producer(config)
    tracker = kafka_client.DeliveryTracker()
    rows: list[tuple[int, bytes | None, list[Any], bytes | None]] = [
        *[(0, f"a{i}".encode(), A, f"v{i}".encode()) for i in range(5)],  # 0-4: dense
        (0, b"a2", B, b"redundant"),  # 5: read for its headers: a2 is followed from here on
        (0, None, [], None),  # 6: no headers, no key, no value
        *[
            (0, f"a{i}".encode(), A, f"w{i}".encode()) for i in range(5)
        ],  # 7-11: dense; a2 at 9, 11 in lookback
        (0, b"z", B, b"last"),  # 12
        *[(1, f"p{i}".encode(), A, b"") for i in range(3)],  # partition 1: no dense span
        (1, b"p3", RENAMED, b""),
    ]
    for partition, key, headers, value in rows:
        prod.produce(topic, value, key, partition=partition, headers=headers, on_delivery=tracker)
    kafka_client.flush(prod, tracker, len(rows), "scan records")
    return config


def _scan(scan: jvm_scan.JvmScan) -> dict[int, list[Any]]:
    found: dict[int, list[Any]] = {}
    for chunk in scan.chunks():
        found.setdefault(chunk.partition, []).append(chunk)
    return found


def test_dense_records_are_sent_only_when_followed_or_in_lookback(env) -> None:
    topic = env.unique("jvmscan")
    config = _fill(env, topic)
    scan = jvm_scan.JvmScan(
        config,
        topic,
        {0: 1, 1: 0},
        {0: 13, 1: 4},
        dense={0: [(0, 4), (7, 11)]},
        lookback={0: [(11, 11)]},
    )
    chunks = _scan(scan)
    assert sorted(chunks) == [0, 1]
    covered = [(c.first, c.last) for c in chunks[0]]
    assert covered[0][0] == 1 and covered[-1][1] == 12
    assert all(after[0] == before[1] + 1 for before, after in itertools.pairwise(covered))
    sent = [
        (int(o), c.keys[i], c.values[i], int(c.header_sets[i]))
        for c in chunks[0]
        for i, o in enumerate(c.offsets)
    ]
    sets = scan.header_sets
    assert [(offset, key, value) for offset, key, value, _ in sent] == [
        (5, b"a2", b"redundant"),
        (6, None, None),
        (9, b"a2", b"w2"),  # dense, its key followed
        (11, b"a4", b"w4"),  # dense, in the lookback range
        (12, b"z", b"last"),
    ]
    assert [number for *_, number in sent][2:4] == [-1, -1]  # dense: headers not read
    assert sets[sent[0][3]] == B and sets[sent[1][3]] == [] and sent[4][3] == sent[0][3]
    partition_one = [
        (int(o), c.keys[i], sets[c.header_sets[i]]) for c in chunks[1] for i, o in enumerate(c.offsets)
    ]
    assert partition_one == [(0, b"p0", A), (1, b"p1", A), (2, b"p2", A), (3, b"p3", RENAMED)]
    assert len(sets) == 4  # each distinct header set once


def test_thousands_of_followed_keys_send_exactly_their_dense_records(env) -> None:
    """The JVM keeps followed keys as hashes in a table that grows (512 keys fit before the first
    growth): after 3,000 records read for their headers, a dense span of 6,000 records sends exactly
    the 3,000 of those keys and counts the others."""
    topic = env.unique("jvmkeys")
    config = {"bootstrap.servers": env.bootstrap}
    kafka_client.ensure_topic(config, topic, partitions=1, replication_factor=1, topic_configs={})
    prod = kafka_client.producer(config)
    tracker = kafka_client.DeliveryTracker()
    read, dense = 3000, 6000
    for n in [*range(read), *range(dense)]:
        prod.produce(topic, b"v", f"key-{n}".encode(), partition=0, headers=B, on_delivery=tracker)
        prod.poll(0)
    kafka_client.flush(prod, tracker, read + dense, "scan records")

    def scanned(**options: Any) -> tuple[list[Any], list[Any]]:
        scan = jvm_scan.JvmScan(
            config, topic, {0: 0}, {0: read + dense}, dense={0: [(read, read + dense - 1)]}, **options
        )
        chunks = _scan(scan)[0]
        covered = [(c.first, c.last) for c in chunks]
        assert covered[0][0] == 0 and covered[-1][1] == read + dense - 1
        assert all(after[0] == before[1] + 1 for before, after in itertools.pairwise(covered))
        sent = [(int(o), c.keys[i], int(c.header_sets[i])) for c in chunks for i, o in enumerate(c.offsets)]
        return chunks, sent

    chunks, sent = scanned()
    followed = [(offset, key) for offset, key, number in sent if number == -1]
    assert len(sent) == 2 * read
    assert followed == [(read + n, f"key-{n}".encode()) for n in range(read)]
    assert len(chunks) == 1  # gathered over the polls (of 2,000 records) into one frame
    small, same = scanned(frame_records=1000)
    assert same == sent and len(small) >= 6 and max(len(c) for c in small) <= 1000


def test_the_first_scan_writes_a_class_data_archive_that_later_scans_start_from(
    env, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first scan archives its classes as it exits; the next starts from the archive; an archive
    the JVM cannot use (here: garbage) is skipped, and the scan still reads every record."""
    import dataclasses

    from airflow_logstore import javac

    archives = tmp_path / "jars"
    real = javac.class_archive
    used: list[javac.ClassArchive] = []

    def in_tmp(name: str, classpath: str, java: str, settings: Any) -> javac.ClassArchive:
        archive = real(name, classpath, java, dataclasses.replace(settings, cache=tmp_path))
        used.append(archive)
        return archive

    monkeypatch.setattr(javac, "class_archive", in_tmp)
    topic = env.unique("jvmcds")
    config = _fill(env, topic)

    def scanned() -> list[int]:
        chunks = _scan(jvm_scan.JvmScan(config, topic, {0: 0, 1: 0}, {0: 13, 1: 4}))
        return [int(o) for p in sorted(chunks) for c in chunks[p] for o in c.offsets]

    everything = [*range(13), *range(4)]
    assert scanned() == everything
    assert used[-1].staging is not None and used[-1].options[0].startswith("-XX:ArchiveClassesAtExit=")
    (archive,) = archives.glob("log-scan-*.jsa")
    assert archive.stat().st_size > 1_000_000 and not list(archives.glob("*.part"))
    assert scanned() == everything
    assert used[-1].staging is None and used[-1].options == [f"-XX:SharedArchiveFile={archive}"]
    archive.chmod(0o644)
    archive.write_bytes(b"not an archive" * 1000)
    assert scanned() == everything


def test_an_end_beyond_the_log_is_reached_once_the_broker_has_nothing_more(env) -> None:
    topic = env.unique("jvmend")
    config = _fill(env, topic)
    started = time.monotonic()
    chunks = _scan(jvm_scan.JvmScan(config, topic, {0: 10}, {0: 20}, idle_timeout_s=2))
    assert [int(o) for c in chunks[0] for o in c.offsets] == [10, 11, 12]
    assert time.monotonic() - started < 30


def test_an_unreachable_broker_fails_with_the_idle_timeout(env) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    scan = jvm_scan.JvmScan({"bootstrap.servers": f"127.0.0.1:{port}"}, "t", {0: 0}, {0: 5}, idle_timeout_s=2)
    with pytest.raises(KafkaUnavailableError, match=r"JVM log scan of 't' failed: .*(no progress|Timeout)"):
        _scan(scan)


def test_a_jvm_that_cannot_start_names_why(env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm_scan, "JVM_OPTIONS", ("-XX:+NoSuchOption",))
    scan = jvm_scan.JvmScan({"bootstrap.servers": env.bootstrap}, "t", {0: 0}, {0: 5})
    with pytest.raises(ServiceError, match="NoSuchOption"):
        _scan(scan)


def test_a_scan_left_early_ends_its_jvm_with_its_temp_files(env, tmp_path, monkeypatch) -> None:
    """A reader that stops before the scan's end (a limit, an error) ends its JVM with SIGTERM first: the
    JVM's exit hooks remove the native LZ4 library it unpacked into its temp dir. A SIGKILL left it
    there, one for every scan left early."""
    monkeypatch.setattr(jvm_scan, "JVM_OPTIONS", (*jvm_scan.JVM_OPTIONS, f"-Djava.io.tmpdir={tmp_path}"))
    topic = env.unique("jvmleft")
    config = {"bootstrap.servers": env.bootstrap}
    kafka_client.ensure_topic(config, topic, partitions=1, replication_factor=1, topic_configs={})
    prod = kafka_client.producer(config, **{"compression.type": "lz4"})
    tracker = kafka_client.DeliveryTracker()
    for i in range(20_000):
        prod.produce(topic, f"v{i}".encode(), f"k{i}".encode(), partition=0, headers=A, on_delivery=tracker)
    kafka_client.flush(prod, tracker, 20_000, "scan records")

    chunks = jvm_scan.JvmScan(config, topic, {0: 0}, {0: 20_000}, frame_records=500).chunks()
    assert len(next(chunks).offsets) > 0
    unpacked = sorted(p.name for p in tmp_path.glob("liblz4-java*"))
    assert unpacked, sorted(p.name for p in tmp_path.iterdir())  # the running JVM's library
    chunks.close()  # the reader stops early

    assert not list(tmp_path.glob("liblz4-java*")), unpacked


# -- the Spark drivers' class archive (airflow_logstore/spark/driver_archive.py) ---------------------------


def test_a_spark_driver_maps_sparks_classes_from_the_drivers_class_archive(env, tmp_path) -> None:
    """Built once (``./dev test`` builds it at its start), the archive is mapped by a driver started after
    it: the JVM's class-load log names it as the source of Spark's classes."""
    from airflow_logstore.spark.driver_archive import JAVA_OPTIONS_KEY, build_driver_archive

    archive = build_driver_archive()
    assert archive is not None and archive.stat().st_size > 10_000_000
    loads = tmp_path / "class-loads.txt"
    script = (
        "import sys\n"
        "from airflow_logstore.spark.session import build_spark_session\n"
        "conf = {sys.argv[1]: sys.argv[2]}\n"
        "spark = build_spark_session('archive-check', master='local[1]', extra_conf=conf)\n"
        "assert spark.range(3).count() == 3\n"
        "spark.stop()\n"
    )
    options = f"-Xlog:class+load=info:file={loads}"
    done = subprocess.run(
        [sys.executable, "-c", script, JAVA_OPTIONS_KEY, options],
        env={**os.environ, **env.env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shared = [line for line in loads.read_text().splitlines() if "source: shared objects file (top)" in line]
    assert any(" org.apache.spark.SparkContext " in line for line in shared), loads.read_text()[-2000:]
    assert len(shared) > 1000  # Spark's start, not a few classes
