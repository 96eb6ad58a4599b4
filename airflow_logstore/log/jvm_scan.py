"""Bulk scans of log partitions in a JVM: records reach Python as columns, never one object per record.

librdkafka hands Python one ``Message`` per record; on the 2-core test machine that bounds any Python
reader at about 120,000 records/s, where the Java client reads the same broker at about 770,000
(``bench/consume_bench.py``). :class:`JvmScan` runs ``java/LogScan.java`` (built into the wheel's
``java/log-scan.jar``; in a source checkout compiled once with the JDK's ``javac``) with the Kafka client
jar that the Spark jobs use, as a child process that reads
[start, end) of each partition and writes :class:`Chunk` frames of one partition, gathered over small
polls (up to ``frame_records`` records, or 100,000 offsets): offsets, header set ids, keys and values
as numpy arrays over one buffer. Each distinct header set crosses once (:attr:`JvmScan.header_sets`).
The first scan writes a class-data archive that later scans start from
(:func:`airflow_logstore.javac.class_archive`).

The request (with the client settings, which may carry SASL credentials) goes through the child's
stdin, never its arguments. A broker silent for the idle timeout (with records due that are still in the
log) fails the scan with the JVM's message in a :class:`~airflow_logstore.exceptions.KafkaUnavailableError`;
offsets below a partition's end that are gone (compaction, retention) count as reached. Like
:func:`airflow_logstore.log.kafka_client.scan` with ``skip_reset``, records that retention deletes while
the scan runs are skipped (the consumer resets to the earliest offset); callers detect that gap
from the first offset they see.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from airflow_logstore.exceptions import KafkaUnavailableError, OptionError, ServiceError
from airflow_logstore.javac import LOG_SCAN
from airflow_logstore.log.deadletter import DeadRecord

SCAN_CLASS = LOG_SCAN.class_name
#: a small heap is enough (a poll's records at a time); the parallel collector keeps up with the scan
JVM_OPTIONS = ("-Xmx512m", "-XX:+UseParallelGC")
_I32 = np.dtype("<i4")
_I64 = np.dtype("<i8")

HeaderList = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class Column:
    """Variable-length byte strings of a chunk: ``lengths`` (-1: null) and ``starts`` into ``data``."""

    lengths: np.ndarray
    starts: np.ndarray  # n + 1 positions in data
    data: bytes

    @classmethod
    def of(cls, lengths: np.ndarray, data: bytes) -> Column:
        starts = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(np.maximum(lengths, 0), out=starts[1:])
        return cls(lengths, starts, data)

    @classmethod
    def of_values(cls, values: Sequence[bytes | None]) -> Column:
        """A column of these values (tests, and callers that have Python values)."""
        lengths = np.array([-1 if value is None else len(value) for value in values], dtype=np.int32)
        return cls.of(lengths, b"".join(value for value in values if value is not None))

    def __getitem__(self, index: int) -> bytes | None:
        index = range(len(self.lengths))[index]
        if self.lengths[index] < 0:
            return None
        return self.data[self.starts[index] : self.starts[index + 1]]

    def pick(self, indexes: np.ndarray) -> list[bytes | None]:
        """The values at ``indexes``, as Python bytes (None for nulls): one step for all of them."""
        data = self.data
        lows = self.starts[indexes].tolist()
        highs = self.starts[indexes + 1].tolist()
        lengths = self.lengths[indexes].tolist()
        return [None if n < 0 else data[low:high] for low, high, n in zip(lows, highs, lengths, strict=True)]

    def arrow(self) -> Any:
        """The column as a pyarrow binary array (zero copy of the data)."""
        import pyarrow as pa

        valid = self.lengths >= 0
        bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(
            pa.large_binary(),
            len(self.lengths),
            [bitmap, pa.py_buffer(self.starts), pa.py_buffer(self.data)],
        )


@dataclass(frozen=True)
class Chunk:
    """The records of one partition at offsets [first, last] that were sent, in offset order: all but
    those of dense spans whose key is not followed and that are outside the lookback ranges (see
    :class:`JvmScan`)."""

    partition: int
    first: int
    last: int
    offsets: np.ndarray  # int64
    header_sets: np.ndarray  # int32: index into JvmScan.header_sets
    keys: Column
    values: Column

    def __len__(self) -> int:
        return len(self.offsets)


def scanned_record(chunk: Chunk, index: int, headers: HeaderList) -> DeadRecord:
    """One record of a chunk, for its dead letter."""
    return DeadRecord(
        chunk.partition,
        int(chunk.offsets[index]),
        key=chunk.keys[index],
        value=chunk.values[index],
        headers=headers,
    )


#: ``auto`` reads in a JVM from this many records on (below, the JVM's start, about 0.7 s, costs more)
JVM_MIN_RECORDS = 200_000
SCANNERS = ("auto", "jvm", "librdkafka")
#: records per chunk at most: Python's cost per chunk is paid once for this many records
FRAME_RECORDS = 20_000


def choose_scanner(scanner: str, records: int) -> str:
    """``jvm`` or ``librdkafka``: ``auto`` takes the JVM for windows of at least :data:`JVM_MIN_RECORDS`
    records when this machine has a JDK (the JVM's start costs about a second)."""
    if scanner not in SCANNERS:
        raise OptionError("scanner", f"'{scanner}' is not one of {', '.join(SCANNERS)}")
    if scanner != "auto":
        return scanner
    return "jvm" if records >= JVM_MIN_RECORDS and available() else "librdkafka"


def available() -> bool:
    """Whether this machine can run the JVM scan: a ``java``, the scan's jar (built into the wheel) or a
    ``javac`` to compile it once, and the ``kafka-clients`` jar among the Spark jars it has
    (:func:`kafka_client_jar`)."""
    from airflow_logstore.javac import java_binary, javac_binary

    compilable = LOG_SCAN.shipped() is not None or javac_binary() is not None
    return java_binary() is not None and compilable and kafka_client_jar() is not None


def kafka_client_jar() -> str | None:
    """The Java Kafka client the Spark jobs use: from ``LOGSTORE_SPARK_JARS``, else from the local jar
    cache (never downloaded here, as for a task's ``--jars``)."""
    from airflow_logstore.jars import configured_spark_jars

    found = [jar for jar in configured_spark_jars() if Path(jar).name.startswith("kafka-clients-")]
    return found[0] if found else None


class JvmScan:
    """One scan: ``for chunk in scan.chunks()``; :attr:`header_sets` grows as new sets arrive. At most
    4096 are held: then the JVM starts the ids again and :attr:`generation` grows (a chunk's ids refer to
    the sets of the generation it was read in, which is the current one while it is handled).

    :param kafka_config: the librdkafka connection settings (mapped to the Java client's).
    :param idle_timeout_s: fail when the broker sends nothing for this long while records are due.
    :param frame_records: a chunk holds at most this many records (and covers at most 100,000 offsets).
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        topic: str,
        starts: Mapping[int, int],
        ends: Mapping[int, int],
        *,
        idle_timeout_s: float = 60.0,
        dense: Mapping[int, Sequence[tuple[int, int]]] | None = None,
        lookback: Mapping[int, Sequence[tuple[int, int]]] | None = None,
        client_settings: Mapping[str, Any] | None = None,
        frame_records: int = FRAME_RECORDS,
    ) -> None:
        self.topic = topic
        self.header_sets: list[HeaderList] = []
        self.generation = 0  # header set ids of chunks read in one generation mean the same sets
        self._request = _request(
            kafka_config,
            topic,
            starts,
            ends,
            idle_timeout_s,
            frame_records,
            dense or {},
            lookback or {},
            client_settings or {},
        )

    def chunks(self) -> Iterator[Chunk]:
        from airflow_logstore.javac import class_archive
        from airflow_logstore.settings import local_settings

        java, classpath = _java(), scan_classpath()
        archive = class_archive("log-scan", classpath, java, local_settings())
        read, write = os.pipe()  # the frames (the JVM's stdout may carry its own messages)
        command = [java, *JVM_OPTIONS, *archive.options, "-cp", classpath, SCAN_CLASS, f"/dev/fd/{write}"]
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(write,),
            )
        finally:
            os.close(write)
        assert process.stdin is not None
        with os.fdopen(read, "rb", buffering=1 << 20) as frames:
            try:
                try:
                    process.stdin.write(self._request.encode())
                    process.stdin.close()
                except BrokenPipeError:  # the JVM did not start: its message says why
                    code, stderr = process.wait(), _stderr(process)
                    raise ServiceError(
                        f"the JVM log scan of {self.topic} could not start ({code}): {stderr}"
                    ) from None
                yield from self._frames(process, frames)
                code = process.wait(timeout=60)  # after the end frame: the JVM closes its client and exits
                if code != 0:
                    raise ServiceError(
                        f"the JVM log scan of {self.topic} exited with {code}: {_stderr(process)}"
                    )
                archive.keep()
            finally:
                if process.poll() is None:  # the reader stopped early (a limit, an error)
                    _stop(process)
                archive.discard()

    def _frames(self, process: subprocess.Popen[bytes], out: IO[bytes]) -> Iterator[Chunk]:
        while True:
            kind = out.read(1)
            if kind == b"R":
                yield _chunk(out)
            elif kind == b"H":
                number, count = _ints(out, 2)
                if number != len(self.header_sets):
                    raise ServiceError(f"JVM log scan: header set {number} out of order")
                self.header_sets.append(_header_set(out, count))
            elif kind == b"C":  # the JVM forgot its header sets: ids start again
                self.header_sets = []
                self.generation += 1
            elif kind == b"E":
                return
            elif kind == b"X":
                (length,) = _ints(out, 1)
                message = _exact(out, length).decode(errors="replace")
                raise KafkaUnavailableError(f"the JVM log scan of '{self.topic}' failed: {message}")
            else:
                code, stderr = process.wait(), _stderr(process)
                raise ServiceError(f"the JVM log scan of {self.topic} ended early (exit {code}): {stderr}")


def _request(
    kafka_config: Mapping[str, Any],
    topic: str,
    starts: Mapping[int, int],
    ends: Mapping[int, int],
    idle_timeout_s: float,
    frame_records: int,
    dense: Mapping[int, Sequence[tuple[int, int]]],
    lookback: Mapping[int, Sequence[tuple[int, int]]],
    client_settings: Mapping[str, Any],
) -> str:
    from airflow_logstore.log.kafka_client import java_client_options

    settings = {
        "bootstrap.servers": str(kafka_config["bootstrap.servers"]),
        **java_client_options(kafka_config),
        **{k: str(v) for k, v in client_settings.items()},
    }
    for key, value in settings.items():
        if "\n" in key or "\n" in value or "=" in key:
            raise ServiceError(f"Kafka client setting {key!r} cannot be passed to the JVM scan (a newline)")
    lines = [f"{key}={value}" for key, value in settings.items()]
    lines += ["--", topic, str(int(idle_timeout_s * 1000)), str(int(frame_records))]
    lines += [f"{p} {int(starts.get(p, 0))} {int(end)}" for p, end in sorted(ends.items())]
    lines += ["--", *_ranges(dense), "--", *_ranges(lookback)]
    return "\n".join(lines) + "\n\n"


def _ranges(ranges: Mapping[int, Sequence[tuple[int, int]]]) -> list[str]:
    return [f"{p} {int(first)} {int(last)}" for p, spans in sorted(ranges.items()) for first, last in spans]


def _chunk(out: IO[bytes]) -> Chunk:
    (partition,) = _ints(out, 1)
    first, last = (int(v) for v in np.frombuffer(_exact(out, 16), dtype=_I64))
    (n,) = _ints(out, 1)
    offsets = np.frombuffer(_exact(out, 8 * n), dtype=_I64)
    sets = np.frombuffer(_exact(out, 4 * n), dtype=_I32)
    key_lengths = np.frombuffer(_exact(out, 4 * n), dtype=_I32)
    (key_bytes,) = _ints(out, 1)
    keys = Column.of(key_lengths, _exact(out, key_bytes))
    value_lengths = np.frombuffer(_exact(out, 4 * n), dtype=_I32)
    (value_bytes,) = _ints(out, 1)
    values = Column.of(value_lengths, _exact(out, value_bytes))
    return Chunk(partition, first, last, offsets, sets, keys, values)


def _header_set(out: IO[bytes], count: int) -> HeaderList:
    headers: HeaderList = []
    for _ in range(count):
        (length,) = _ints(out, 1)
        name = _exact(out, length).decode()
        (length,) = _ints(out, 1)
        headers.append((name, None if length < 0 else _exact(out, length)))
    return headers


def _ints(out: IO[bytes], count: int) -> list[int]:
    return [int(v) for v in np.frombuffer(_exact(out, 4 * count), dtype=_I32)]


def _exact(out: IO[bytes], size: int) -> bytes:
    data = out.read(size)
    if len(data) != size:
        raise ServiceError(f"the JVM log scan ended in the middle of a frame ({len(data)} of {size} bytes)")
    return data


def _stderr(process: subprocess.Popen[bytes], lines: int = 15) -> str:
    text = process.stderr.read().decode(errors="replace") if process.stderr else ""
    return "\n".join(text.strip().splitlines()[-lines:]) or "(nothing on stderr)"


def _java() -> str:
    from airflow_logstore.javac import java_binary

    java = java_binary()
    if java is None:
        raise ServiceError("the JVM log scan needs Java 17 (`java` on PATH or JAVA_HOME)")
    return java


_CLASSPATH: dict[str, str] = {}


def scan_classpath() -> str:
    """``LogScan`` (the wheel's jar, else compiled once) and the Kafka client: the jar the Spark jobs
    use, with the compression codecs and logging of the pyspark wheel."""
    from airflow_logstore.settings import local_settings

    settings = local_settings()
    client = kafka_client_jar()
    if client is None:
        raise ServiceError(
            "the JVM log scan needs the kafka-clients jar of the Spark jars: set LOGSTORE_SPARK_JARS "
            "(a folder or comma-separated jars) or fill the local cache (in a checkout: `./dev services up`)"
        )
    cached = _CLASSPATH.get(client)
    if cached is not None:
        return cached
    wheel_jars = _pyspark_jars()
    libraries = [
        str(jar)
        for jar in sorted(wheel_jars.glob("*.jar"))
        if jar.name.startswith(("lz4-java", "snappy-java", "zstd-jni", "slf4j-api", "slf4j-nop"))
    ]
    jars = os.pathsep.join([client, *libraries])
    jar = LOG_SCAN.jar(jars, settings)  # a jar, not a class folder: the class-data archive takes jars only
    _CLASSPATH[client] = found = os.pathsep.join([str(jar), jars])
    return found


def _pyspark_jars() -> Path:
    """The jars folder of the pyspark wheel, found without importing pyspark (about 0.1 s).

    In a Spark task's Python worker pyspark is imported from ``$SPARK_HOME/python/lib/pyspark.zip``, which
    has no jars: ``SPARK_HOME`` comes first (the ``logstore`` Spark source runs the scan there).
    """
    import importlib.util

    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError("the JVM log scan needs the pyspark wheel's jars (pyspark is not installed)")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


#: How long a scan's JVM may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 10


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End a scan's JVM before its end: SIGTERM first, so that its exit hooks remove the native library
    it unpacked into the temp dir (LZ4's, about 1 MB with its lock file; a SIGKILL leaves them there),
    SIGKILL if it has not exited after :data:`STOP_TIMEOUT_S`."""
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
