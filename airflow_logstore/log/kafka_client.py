"""Kafka clients for the LogStore: topic admin, producers, log scans and the control topic.

Every client is built from one librdkafka configuration: the table's bootstrap servers plus the
connection's settings (security, SASL). Producers are idempotent with ``acks=all``; keys are
partitioned with murmur2 like the Java client. Writers never use Kafka transactions: only the
checkpointers of the control state do, to fence each other (:func:`transactional_producer`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_logstore.core import ranges
from airflow_logstore.core.codec import PRODUCER_PARTITIONER
from airflow_logstore.exceptions import KafkaUnavailableError, TopicError

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message, Producer
    from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0  # LOGSTORE_KAFKA_TIMEOUT_S changes it (see settings.py)
# Settings of the connection that are for one client kind only; dropped where they do not apply.
_PRODUCER_ONLY = {
    "acks",
    "enable.idempotence",
    "linger.ms",
    "batch.size",
    "compression.type",
    "partitioner",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "max.in.flight.requests.per.connection",
}
_CONSUMER_ONLY = {
    "group.id",
    "auto.offset.reset",
    "enable.auto.commit",
    "isolation.level",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "enable.partition.eof",
    "session.timeout.ms",
    "fetch.min.bytes",
}


class _ErrorCollector:
    """Remembers the last client-level error (auth failures, all brokers down) to name it."""

    def __init__(self) -> None:
        self.last: Any = None

    def __call__(self, error: Any) -> None:
        self.last = error

    def describe(self) -> str:
        return f": {self.last.str()}" if self.last is not None else ""


def client_config(bootstrap_servers: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The common librdkafka settings: the table's servers plus the connection's extra settings."""
    config = {k: v for k, v in dict(extra or {}).items() if not callable(v) or k.endswith("_cb")}
    config["bootstrap.servers"] = bootstrap_servers
    config.setdefault("socket.timeout.ms", 10000)
    return config


def request_timeout(timeout: float | None) -> float:
    """``timeout``, or ``LOGSTORE_KAFKA_TIMEOUT_S`` (default :data:`DEFAULT_TIMEOUT_S`) when None."""
    from airflow_logstore.settings import kafka_timeout_s

    return kafka_timeout_s() if timeout is None else timeout


def _only(config: Mapping[str, Any], drop: set[str]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in drop}


def admin_client(config: Mapping[str, Any]) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    return AdminClient(_only(config, _PRODUCER_ONLY | _CONSUMER_ONLY))


def producer(config: Mapping[str, Any], **overrides: Any) -> Producer:
    """A new idempotent producer (for long runs; short appends use :func:`shared_producer`)."""
    from confluent_kafka import Producer

    return Producer(producer_settings(config, **overrides))


def transactional_producer(config: Mapping[str, Any], transactional_id: str, **overrides: Any) -> Producer:
    """A new producer under ``transactional_id``: its ``init_transactions`` fences every earlier
    producer of that id (their open transaction is aborted, their later commits fail). Only the
    checkpointers of a table's control state use one (:mod:`airflow_logstore.log.control_topic`); the
    writers never do."""
    from confluent_kafka import Producer

    settings = producer_settings(config, **overrides)
    settings["transactional.id"] = transactional_id
    return Producer(settings)


def init_transactions(prod: Producer, timeout: float) -> None:
    """``prod.init_transactions(timeout)`` (which fences every earlier producer of its transactional
    id), after one metadata request. librdkafka sends its first transaction coordinator query through
    the bootstrap broker's handle, which the first metadata answer replaces; a query caught in that
    swap waits librdkafka's fixed 500 ms coordinator timer (about one init in six here). With the
    brokers known first it does not. A metadata request that fails leaves the error to the init."""
    from confluent_kafka import KafkaException

    with suppress(KafkaException):
        prod.list_topics(timeout=min(timeout, 5.0))
    prod.init_transactions(timeout)


def is_fenced(exc: BaseException) -> bool:
    """True when a transactional producer was fenced by a newer one of its transactional id."""
    from confluent_kafka import KafkaError, KafkaException

    if not isinstance(exc, KafkaException) or not exc.args:
        return False
    error = exc.args[0]
    codes = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
    return error.code() in codes


def last_committed(cons: Consumer, topic: str, partition: int = 0) -> Message | None:
    """The last committed record of ``topic``'s partition (None: none), read with ``cons`` made with
    :func:`committed_consumer`: records of aborted or still open transactions and transaction markers are
    skipped, so the answer never waits for a transaction to end."""
    from confluent_kafka import KafkaError, TopicPartition

    low, high = cons.get_watermark_offsets(
        TopicPartition(topic, partition), timeout=request_timeout(None), cached=False
    )
    step = 16
    start = max(low, high - step)
    while high > low:
        cons.assign([TopicPartition(topic, partition, start)])
        last = None
        deadline = time.monotonic() + request_timeout(None)
        try:
            while time.monotonic() < deadline:
                message = cons.poll(0.2)
                if message is None:
                    continue
                error = message.error()
                if error is None:
                    last = message
                elif error.code() == KafkaError._PARTITION_EOF:
                    break
                else:
                    raise KafkaUnavailableError(f"reading '{topic}' failed: {error.str()}")
            else:
                raise KafkaUnavailableError(f"reading '{topic}': no end of partition {partition} in time")
        finally:
            cons.unassign()
        if last is not None or start <= low:
            return last
        step *= 16
        start = max(low, high - step)
    return None


def await_committed(cons: Consumer, topic: str, offset: int, timeout: float, partition: int = 0) -> bool:
    """Wait until the record at ``offset`` of a transaction this process committed is readable by
    :func:`last_committed` (True), or ``timeout`` passed (False). ``commit_transaction`` returns once
    the coordinator decided the commit; it writes the markers to the partition after that, and a
    read-committed reader sees the record only then."""
    return wait_until(lambda: _last_offset(cons, topic, partition) >= offset, timeout, interval=0.05)


def _last_offset(cons: Consumer, topic: str, partition: int) -> int:
    message = last_committed(cons, topic, partition)
    return -1 if message is None else message.offset()


def committed_consumer(config: Mapping[str, Any], **overrides: Any) -> Consumer:
    """A consumer for :func:`last_committed`: committed records only, and the end of a partition
    reported (librdkafka reports it at the last stable offset)."""
    return consumer(
        config, **{"isolation.level": "read_committed", "enable.partition.eof": True, **overrides}
    )


def producer_settings(config: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    settings = _only(config, _CONSUMER_ONLY)
    settings.update(
        {
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": PRODUCER_PARTITIONER,
            "linger.ms": settings.get("linger.ms", 20),
            "message.timeout.ms": settings.get("message.timeout.ms", 60000),
            "compression.type": settings.get("compression.type", "lz4"),
        }
    )
    settings.update(overrides)
    settings.pop("transactional.id", None)  # writers never use Kafka transactions
    return settings


@dataclass
class _SharedProducer:
    key: tuple[tuple[str, str], ...]
    producer: Producer
    lock: threading.Lock


class _SharedProducers:
    """This process's shared producers, one per configuration; forgotten (never destroyed) on fork."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: dict[tuple[tuple[str, str], ...], _SharedProducer] = {}
        # a forked child must not destroy its parent's clients: their threads do not exist there
        self.orphans: list[_SharedProducer] = []

    def get(self, settings: Mapping[str, Any]) -> _SharedProducer:
        from confluent_kafka import Producer

        key = tuple(sorted((name, repr(value)) for name, value in settings.items()))
        with self.lock:
            entry = self.entries.get(key)
            if entry is None:
                entry = self.entries[key] = _SharedProducer(key, Producer(dict(settings)), threading.Lock())
            return entry

    def discard(self, entry: _SharedProducer) -> None:
        with self.lock:
            if self.entries.get(entry.key) is entry:
                del self.entries[entry.key]
        entry.producer.purge()  # nothing queued in it may be delivered later, out of its caller's sight

    def close(self) -> None:
        with self.lock:
            entries, self.entries = list(self.entries.values()), {}
        for entry in entries:
            with entry.lock:  # after its current caller's flush
                entry.producer.purge()

    def forget_after_fork(self) -> None:
        self.orphans.extend(self.entries.values())
        self.entries = {}
        self.lock = threading.Lock()


_SHARED_PRODUCERS = _SharedProducers()


def close_shared_producers() -> None:
    """Drop this process's shared producers (before stopping the brokers they are connected to)."""
    _SHARED_PRODUCERS.close()


def _forget_shared_producers_after_fork() -> None:
    _SHARED_PRODUCERS.forget_after_fork()


os.register_at_fork(after_in_child=_forget_shared_producers_after_fork)


@contextmanager
def shared_producer(config: Mapping[str, Any], **overrides: Any) -> Iterator[Producer]:
    """A producer kept for this process and configuration, lent to one caller at a time.

    A new idempotent producer needs about half a second to get its producer id from the broker before
    it sends anything; short, frequent appends (control records, each batch's log records in a Spark
    worker) reuse one instead. The caller must flush before leaving the block. On any error the
    producer is purged and dropped, so a later caller starts clean.
    """
    entry = _SHARED_PRODUCERS.get(producer_settings(config, **overrides))
    with entry.lock:
        try:
            yield entry.producer
        except BaseException:
            _SHARED_PRODUCERS.discard(entry)
            raise


def consumer(config: Mapping[str, Any], **overrides: Any) -> Consumer:
    from confluent_kafka import Consumer

    settings = _only(config, _PRODUCER_ONLY)
    settings.update(
        {
            "group.id": settings.get("group.id", f"logstore-reader-{uuid.uuid4().hex[:12]}"),
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_uncommitted",
            "queued.max.messages.kbytes": settings.get("queued.max.messages.kbytes", 16384),
        }
    )
    settings.update(overrides)
    return Consumer(settings)


_JAVA_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_SHARED_KEYS = ("security.protocol", "client.id", "ssl.endpoint.identification.algorithm")


def java_client_options(extra: Mapping[str, Any]) -> dict[str, str]:
    """The Java Kafka client settings (for Spark's Kafka source) equivalent to librdkafka's ``extra``.

    SASL username/password become a ``sasl.jaas.config`` (Spark redacts it in plans and logs).
    """
    options = {key: str(extra[key]) for key in _SHARED_KEYS if key in extra}
    mechanism = str(extra.get("sasl.mechanism") or extra.get("sasl.mechanisms") or "")
    if mechanism:
        options["sasl.mechanism"] = mechanism
        module = _JAVA_LOGIN_MODULES.get(mechanism.upper())
        if module and "sasl.username" in extra:
            user = str(extra["sasl.username"]).replace('"', '\\"')
            password = str(extra.get("sasl.password", "")).replace('"', '\\"')
            options["sasl.jaas.config"] = f'{module} required username="{user}" password="{password}";'
    return options


# -- topics ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    configs: dict[str, str]


def topic_id(config: Mapping[str, Any], topic: str, timeout: float | None = None) -> str | None:
    """The topic's id (Kafka gives every topic a new one when it is created), None when it is missing."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection

    timeout = request_timeout(timeout)
    admin = admin_client(config)
    try:
        found = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic]
        return str(found.result(timeout=timeout).topic_id)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID):
            return None
        raise KafkaUnavailableError(f"Kafka did not describe topic '{topic}': {exc}") from exc


def describe_topic(config: Mapping[str, Any], topic: str, timeout: float | None = None) -> TopicInfo | None:
    """The topic's partition count and settings, or None when it does not exist (yet, for the broker
    that answered)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import ConfigResource

    timeout = request_timeout(timeout)
    metadata, admin = _metadata(config, topic, timeout)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return None
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        described = admin.describe_configs([resource])[resource].result(timeout=timeout)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None  # a new topic the answering broker has not learned yet (several brokers)
        raise
    return TopicInfo(topic, len(found.partitions), {k: v.value for k, v in described.items()})


def _metadata(config: Mapping[str, Any], topic: str | None, timeout: float) -> tuple[Any, AdminClient]:
    """Cluster metadata; fails fast and clearly on authentication errors, else after ``timeout``."""
    from confluent_kafka import KafkaError

    errors = _ErrorCollector()
    admin: AdminClient | None = admin_client({**config, "error_cb": errors})
    deadline = time.monotonic() + timeout
    problem = ""
    while admin is not None:
        try:
            return admin.list_topics(topic=topic, timeout=min(2.0, timeout)), admin
        except Exception as exc:
            admin.poll(0.1)  # serves error_cb
            last = errors.last
            if last is not None and last.code() in (
                KafkaError._AUTHENTICATION,
                KafkaError.SASL_AUTHENTICATION_FAILED,
            ):
                problem = f"Kafka at {config.get('bootstrap.servers')} refused the credentials: {last.str()}"
            elif time.monotonic() >= deadline:
                problem = (
                    f"Kafka at {config.get('bootstrap.servers')} did not answer within {timeout:.0f}s"
                    f"{errors.describe()} ({exc})"
                )
            if problem:
                admin = None  # release the client now: it would keep retrying (and logging) in the background
    raise KafkaUnavailableError(problem)


#: From this replication factor on, a write needs two in-sync replicas (``acks=all`` then survives the
#: loss of one broker without losing an acknowledged record).
MIN_INSYNC_FROM_REPLICATION = 3


def durability_configs(replication_factor: int) -> dict[str, str]:
    """Topic settings that follow from the replication factor: ``min.insync.replicas=2`` from 3 on."""
    return {"min.insync.replicas": "2"} if replication_factor >= MIN_INSYNC_FROM_REPLICATION else {}


def broker_default_replication_factor(config: Mapping[str, Any], timeout: float = 30.0) -> int:
    """The cluster's ``default.replication.factor``, as a broker reports it."""
    from confluent_kafka.admin import ConfigResource

    metadata, admin = _metadata(config, None, timeout)
    if not metadata.brokers:
        raise KafkaUnavailableError(f"Kafka at {config.get('bootstrap.servers')} reported no brokers")
    broker = min(metadata.brokers)
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
    described = admin.describe_configs([resource])[resource].result(timeout=timeout)
    entry = described.get("default.replication.factor")
    if entry is None or entry.value is None:
        raise TopicError(f"broker {broker} did not report its default.replication.factor")
    return int(entry.value)


def ensure_topic(
    config: Mapping[str, Any],
    topic: str,
    *,
    partitions: int,
    replication_factor: int | None,
    topic_configs: Mapping[str, str],
    timeout: float | None = None,
) -> tuple[TopicInfo, bool]:
    """Create ``topic`` or verify the existing one has ``partitions``; return (info, created).

    :param replication_factor: None for the broker's ``default.replication.factor``; the new topic
        gets :func:`durability_configs` for it (``topic_configs`` may override them).
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    timeout = request_timeout(timeout)
    existing = describe_topic(config, topic, timeout)
    if existing is not None:
        if existing.partitions != partitions:
            raise TopicError(
                f"topic '{topic}' exists with {existing.partitions} partitions, the table expects "
                f"{partitions} (log-store.partitions); per-key order would break, so it is not changed"
            )
        return existing, False
    if replication_factor is None:
        replication_factor = broker_default_replication_factor(config, timeout)
    admin = admin_client(config)
    settings = {**durability_configs(replication_factor), **topic_configs}
    request = NewTopic(
        topic, num_partitions=partitions, replication_factor=replication_factor, config=settings
    )
    try:
        admin.create_topics([request])[topic].result(timeout=timeout)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise TopicError(f"cannot create topic '{topic}': {exc}") from None
    created = _wait_for_topic(config, topic, timeout)
    return created, True


def delete_topics(config: Mapping[str, Any], topics: list[str], timeout: float | None = None) -> list[str]:
    """Delete those of ``topics`` that exist and wait until they are gone; return the deleted ones."""
    timeout = request_timeout(timeout)
    existing = [topic for topic in topics if describe_topic(config, topic, timeout) is not None]
    if not existing:
        return []
    admin = admin_client(config)
    for topic, future in admin.delete_topics(existing, operation_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
        except Exception as exc:
            if "UNKNOWN_TOPIC" not in str(exc):
                raise TopicError(f"cannot delete topic '{topic}': {exc}") from None
    if not wait_until(lambda: all(describe_topic(config, t, timeout) is None for t in existing), timeout):
        raise TopicError(f"topics {existing} were deleted but still show up after {timeout:.0f}s")
    return existing


def _wait_for_topic(config: Mapping[str, Any], topic: str, timeout: float) -> TopicInfo:
    deadline = time.monotonic() + timeout
    while True:
        info = describe_topic(config, topic, timeout)
        if info is not None:
            return info
        if time.monotonic() > deadline:
            raise TopicError(f"topic '{topic}' was created but does not show up")
        time.sleep(0.2)


def require_topic(config: Mapping[str, Any], topic: str) -> TopicInfo:
    info = describe_topic(config, topic)
    if info is None:
        raise TopicError(
            f"log topic '{topic}' does not exist on {config.get('bootstrap.servers')}; "
            "create the table with 'logstore table create' (or LogStoreCreateTableOperator) first"
        )
    return info


def partition_offsets(
    cons: Consumer, topic: str, partitions: int, timeout: float | None = None
) -> dict[int, tuple[int, int]]:
    """Per partition (log start offset, end offset)."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    timeout = request_timeout(timeout)
    missing = (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART)
    result = {}
    for partition in range(partitions):
        try:
            low, high = cons.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout, cached=False
            )
        except KafkaException as exc:
            if exc.args and exc.args[0].code() in missing:
                raise TopicError(
                    f"topic '{topic}' has no partition {partition}: the topic is missing or has fewer "
                    "partitions than the table's log-store.partitions; 'logstore table create' creates it"
                ) from exc
            raise KafkaUnavailableError(
                f"Kafka did not answer for the offsets of '{topic}' partition {partition}: "
                f"{exc.args[0].str() if exc.args else exc}"
            ) from exc
        result[partition] = (low, high)
    return result


def offsets_for_time(cons: Consumer, topic: str, partitions: int, timestamp_ms: int) -> dict[int, int]:
    """Per partition the first offset at or after ``timestamp_ms`` (the end offset if none)."""
    from confluent_kafka import TopicPartition

    found = cons.offsets_for_times(
        [TopicPartition(topic, p, timestamp_ms) for p in range(partitions)], timeout=request_timeout(None)
    )
    ends = partition_offsets(cons, topic, partitions)
    return {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition][1] for tp in found}


def scan(
    cons: Consumer,
    topic: str,
    start: Mapping[int, int],
    end: Mapping[int, int],
    *,
    batch_size: int = 10000,
    poll_timeout: float = 0.05,
    idle_timeout: float = DEFAULT_TIMEOUT_S,
    skip_reset: bool = False,
) -> Iterator[list[Message]]:
    """Yield batches of messages of ``topic`` from ``start`` (inclusive) to ``end`` (exclusive).

    The one topic scan: readers (in chunks of ``batch_size``), publishing, checkpoints and the
    reconciler's scan use it. Messages
    come in offset order per partition. Stops when every partition reached its end; raises when the
    broker stays silent for ``idle_timeout`` (offsets below the end that are gone, transaction markers
    or compacted records, count as reached).

    :param skip_reset: skip the consumer's offset-reset errors. librdkafka reports one only to a consumer
        made with ``auto.offset.reset=error``; with this module's default (``earliest``) records that
        retention deletes while the scan runs are skipped without one. A caller that must not pass
        records unseen (the publish) makes its consumer with ``error`` and leaves this False.
    """
    from confluent_kafka import KafkaError, TopicPartition

    pending = {p: end[p] for p in end if start.get(p, 0) < end[p]}
    if not pending:
        return
    skipped = {KafkaError._PARTITION_EOF}
    if skip_reset:
        skipped.add(KafkaError._AUTO_OFFSET_RESET)
    cons.assign([TopicPartition(topic, p, start.get(p, 0)) for p in pending])
    following = {p: start.get(p, 0) for p in pending}  # the next offset expected per partition
    answered: dict[int, float] = {}  # partitions whose leader answered while nothing came (see _settle_idle)
    last_progress = time.monotonic()
    try:
        while pending:
            # consume() returns once it has num_messages or after the timeout: ask for no more than are
            # left, so the last batch of a range comes at once (a compacted topic may have fewer)
            left = sum(pending[p] - following[p] for p in pending)
            messages = cons.consume(num_messages=max(1, min(batch_size, left)), timeout=poll_timeout)
            batch = _in_range(messages, topic, pending, following, skipped)
            if batch:
                last_progress = time.monotonic()
                answered.clear()
                yield batch
            elif time.monotonic() - last_progress > idle_timeout:
                _settle_idle(cons, topic, pending, idle_timeout, answered)
    finally:
        cons.unassign()


def _in_range(
    messages: list[Message],
    topic: str,
    pending: dict[int, int],
    following: dict[int, int],
    skipped: set[int],
) -> list[Message]:
    """The messages below their partition's end; drops the partitions that reached it from ``pending``.

    No Python step per message: errors, partitions and offsets are read with one C-level pass per
    method (``map``), the cut at each partition's end is one numpy comparison. A bulk reader's chunk
    of tens of thousands of records costs milliseconds here.
    """
    import numpy as np

    if not messages:
        return []
    kind = type(messages[0])
    if any(map(kind.error, messages)):
        messages = _without_errors(messages, topic, skipped)
        if not messages:
            return []
    partitions = np.fromiter(map(kind.partition, messages), np.int64, len(messages))
    offsets = np.fromiter(map(kind.offset, messages), np.int64, len(messages))
    stops = np.full(int(partitions.max()) + 1, -1, dtype=np.int64)  # -1: not pending, nothing inside
    for partition, stop in pending.items():
        if partition < len(stops):
            stops[partition] = stop
    inside = offsets < stops[partitions]
    for partition in np.unique(partitions[inside]).tolist():
        following[partition] = int(offsets[inside & (partitions == partition)].max()) + 1
        if following[partition] >= pending[partition]:
            del pending[partition]
    return messages if inside.all() else [messages[i] for i in np.flatnonzero(inside).tolist()]


def _without_errors(messages: list[Message], topic: str, skipped: set[int]) -> list[Message]:
    """The messages that are records; the ``skipped`` errors dropped, any other error raised."""
    from confluent_kafka import KafkaError

    kept = []
    for message in messages:
        error = message.error()
        if error is None:
            kept.append(message)
        elif error.code() == KafkaError._AUTO_OFFSET_RESET and error.code() not in skipped:
            raise KafkaUnavailableError(
                f"reading '{topic}' partition {message.partition()}: records from the offset asked for "
                f"were deleted (retention) while it was read ({error.str()}); run it again"
            )
        elif error.code() not in skipped:
            raise KafkaUnavailableError(f"reading '{topic}' failed: {error.str()}")
    return kept


#: Seconds a partition the scan consumed nothing from must stay silent after its leader answered, before
#: the offsets left in its range count as not records (at most the scan's idle timeout).
ANSWERED_GRACE_S = 5.0


def _settle_idle(
    cons: Consumer, topic: str, pending: dict[int, int], idle_timeout: float, answered: dict[int, float]
) -> None:
    """After ``idle_timeout`` without records: a partition whose position reached its end is done (the
    offsets left below it are gone: transaction markers, compaction, retention).

    A partition the scan consumed nothing from has no position. Its range may hold no record at all
    (only transaction markers, or records compacted away), or its leader may be unreachable: only the
    first is done. It counts as done once its leader answers (its offsets, asked now) and still nothing
    came for :data:`ANSWERED_GRACE_S` (``answered`` keeps when it first answered; a leader back from an
    outage is fetched from by then). Raise for a partition that made no progress and whose leader does
    not answer, and for one whose position stopped below its end.
    """
    from confluent_kafka import TopicPartition

    positions = {tp.partition: tp.offset for tp in cons.position([TopicPartition(topic, p) for p in pending])}
    grace = min(ANSWERED_GRACE_S, idle_timeout)
    for partition, position in positions.items():
        if position >= pending.get(partition, 0):
            pending.pop(partition, None)
        elif position >= 0:
            answered.pop(partition, None)  # it has a position now: stopped below its end, stuck
        elif (partition in answered or _leader_answers(cons, topic, partition)) and _grace_over(
            answered, partition, grace
        ):
            pending.pop(partition, None)
    stuck = {p: end for p, end in pending.items() if p not in answered}
    if stuck:
        raise KafkaUnavailableError(
            f"no progress reading '{topic}' for {idle_timeout:.0f}s "
            f"(positions {positions}, targets {stuck}; a partition without a position: its leader did not "
            "answer)"
        )


def _grace_over(answered: dict[int, float], partition: int, grace: float) -> bool:
    """Whether ``grace`` seconds passed since ``partition``'s leader first answered (now, if it just did:
    asking may have taken the request timeout, which is no grace)."""
    since = answered.setdefault(partition, time.monotonic())
    return time.monotonic() - since >= grace


def _leader_answers(cons: Consumer, topic: str, partition: int) -> bool:
    """Whether ``partition``'s leader answers for its offsets now (within the request timeout)."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        cons.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=request_timeout(None), cached=False
        )
    except KafkaException:
        return False
    return True


class DeliveryTracker:
    """Collects delivery reports: per partition first/last offset, and the first error."""

    def __init__(self) -> None:
        self.offsets: dict[int, tuple[int, int]] = {}
        self.delivered = 0
        self.error: Any = None

    def __call__(self, err: Any, message: Message) -> None:
        if err is not None:
            if self.error is None:
                self.error = err
            return
        self.delivered += 1
        partition, offset = message.partition(), message.offset()
        self.offsets[partition] = ranges.widen(self.offsets.get(partition), offset, offset)

    def raise_for_errors(self, what: str) -> None:
        if self.error is not None:
            raise KafkaUnavailableError(f"{what}: delivery failed: {self.error.str()}")


#: One record to produce: key, value, partition (``ANY_PARTITION``: by the key's hash), headers, and
#: optionally its timestamp in ms (a copy keeps its original's; without one the producer stamps it).
Outgoing = tuple[bytes | None, bytes | None, int, Any] | tuple[bytes | None, bytes | None, int, Any, int]
ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the partitioner chooses
#: How many records go to the producer between two polls for delivery reports.
POLL_EVERY = 5000


def produce_each(prod: Producer, topic: str, records: Iterable[Outgoing], tracker: DeliveryTracker) -> int:
    """Hand ``records`` to the producer in order, waiting for room when its bounded queue is full.

    The one produce loop: every writer of records (the dual write, the reconciler, the control topic)
    uses it, then :func:`flush`. Returns how many records it handed over.
    """
    sent = 0
    for key, value, partition, headers, *stamp in records:
        while True:
            try:
                prod.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    headers=headers,
                    on_delivery=tracker,
                    timestamp=stamp[0] if stamp else 0,
                )
                break
            except BufferError:  # the queue is full: serve delivery reports until there is room
                prod.poll(0.05)
        sent += 1
        if sent % POLL_EVERY == 0:
            prod.poll(0)
    return sent


def flush(prod: Producer, tracker: DeliveryTracker, expected: int, what: str, timeout: float = 120.0) -> None:
    remaining = prod.flush(timeout)
    tracker.raise_for_errors(what)
    if remaining or tracker.delivered < expected:
        raise KafkaUnavailableError(
            f"{what}: {expected - tracker.delivered} of {expected} records were not acknowledged "
            f"within {timeout:.0f}s"
        )


def message_timestamp_ms(message: Message) -> int | None:
    """The record's Kafka timestamp (``LogAppendTime`` or ``CreateTime``), None when it has none."""
    kind, value = message.timestamp()
    return None if kind == 0 or value < 0 else int(value)  # 0: TIMESTAMP_NOT_AVAILABLE


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
