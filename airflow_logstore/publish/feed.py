"""The committed feed's copy: a publish copies what became visible to ``<topic>.committed``, once.

After a publish moved the watermark, :func:`copy_to_feed`

1. takes the feed's token: ``init_transactions`` of the table's one feed transactional id
   (:func:`~airflow_logstore.core.feed.feed_transactional_id`), which fences every earlier publisher of the
   feed (its open transaction is aborted, its later commits fail);
2. *then* reads the feed's progress, the last committed record of the progress topic;
3. scans the log from the progress to the watermark and, in chunks of :data:`CHUNK_RECORDS`, copies the
   records a consistent reader returns (:class:`~airflow_logstore.core.feed.FeedCopy`) to the same
   partition of the committed topic, key, value and headers as they are, with the new progress record,
   in one transaction. A copy keeps its original's timestamp.

So the committed transactions of the feed cover contiguous, disjoint log ranges: each starts where the
previous committed one ended (it read that progress after taking the token, and a transaction of an
older holder can no longer commit). A publisher killed inside a transaction leaves an open one, which
the next publisher's ``init_transactions`` aborts (else the broker, after :data:`TRANSACTION_TIMEOUT_MS`);
the next copy starts from the last committed progress, so it copies those records once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from airflow_logstore.core.control import ControlState
from airflow_logstore.core.feed import (
    PROGRESS_KEY,
    FeedCopy,
    copy_range,
    encode_progress,
    feed_transactional_id,
)
from airflow_logstore.exceptions import FencedError
from airflow_logstore.log import kafka_client
from airflow_logstore.log.feed_topic import ensure_feed_topics, read_progress
from airflow_logstore.pause import pause_point
from airflow_logstore.table.tables import LogSide

log = logging.getLogger(__name__)

#: At most this many log records are considered per transaction: a copy stays short however far behind.
CHUNK_RECORDS = 20_000
#: A publisher that dies inside a copy holds the feed's consumers for at most this long (the next
#: publisher aborts its transaction at once).
TRANSACTION_TIMEOUT_MS = 60_000


def copy_to_feed(
    side: LogSide, state: ControlState, watermark: Mapping[int, int], log_start: Mapping[int, int]
) -> dict[str, Any]:
    """Copy the records that are visible at ``watermark`` and not yet in the feed (see the module).

    :param state: the control state ``watermark`` was decided on (every record below it is decided).
    :param log_start: per log partition its first offset, read before ``state``.
    :returns: the copy in numbers: ``copied``, the other decisions, ``transactions``, the progress.
    :raises FencedError: a newer publisher took the feed's token meanwhile (it copies these records).
    """
    ensure_feed_topics(side.kafka_config, side.config)
    topic, progress_topic = side.config.feed_topics()
    timeout = kafka_client.request_timeout(None)
    prod = kafka_client.transactional_producer(
        side.kafka_config,
        feed_transactional_id(side.topic),
        **{
            "linger.ms": 0,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
        },
    )
    try:
        kafka_client.init_transactions(prod, timeout)  # fences every earlier publisher of the feed
        pause_point("feed:token-taken")
        progress = read_progress(side.kafka_config, progress_topic)  # after the token
        span = copy_range(progress, watermark, log_start)
        if span.gaps:
            log.warning(
                "committed feed '%s': retention deleted log records before they were copied: %s",
                topic,
                {str(p): list(gap) for p, gap in span.gaps.items()},
            )
        report: dict[str, Any] = {"transactions": 0, "gaps": {str(p): list(g) for p, g in span.gaps.items()}}
        if span.empty and not span.gaps:  # a gap is passed once: its progress is committed
            report["progress"] = {str(p): o for p, o in sorted(span.start.items())}
            return report
        copy = FeedCopy(state, watermark, span.start)
        _copy(side, prod, copy, span.start, span.end, topic, progress_topic, report, timeout)
        report.update(copy.counts)
        report["progress"] = {str(p): o for p, o in sorted(copy.progress.items())}
        return report
    except Exception as exc:
        if kafka_client.is_fenced(exc):
            raise FencedError(
                f"committed feed '{topic}': a newer publisher took the feed's transactional id while this "
                "one copied; its open copy was aborted and the newer publisher copies those records"
            ) from exc
        _abort(prod)
        raise
    finally:
        prod.purge()


def _copy(
    side: LogSide,
    prod: Any,
    copy: FeedCopy,
    start: Mapping[int, int],
    end: Mapping[int, int],
    topic: str,
    progress_topic: str,
    report: dict[str, Any],
    timeout: float,
) -> None:
    """Scan ``start``..``end`` and commit the copies with their progress, a transaction per chunk."""
    # records retention deletes while the scan runs fail the copy (retryable), never pass unseen
    cons = kafka_client.consumer(side.kafka_config, **{"auto.offset.reset": "error", "fetch.wait.max.ms": 5})
    tracker = kafka_client.DeliveryTracker()
    try:
        pending = 0
        prod.begin_transaction()
        for batch in kafka_client.scan(cons, side.topic, start, end, poll_timeout=0.01):
            taken: Iterator[kafka_client.Outgoing] = (
                (message.key(), message.value(), message.partition(), message.headers(), _stamp(message))
                for message in batch
                if copy.take(message.partition(), message.offset(), message.headers())
            )
            kafka_client.produce_each(prod, topic, taken, tracker)
            pending += len(batch)
            if pending >= CHUNK_RECORDS:
                _commit(prod, progress_topic, copy.progress, tracker, timeout)
                report["transactions"] += 1
                pending = 0
                prod.begin_transaction()
        _commit(prod, progress_topic, copy.finish(end), tracker, timeout)
        report["transactions"] += 1
    finally:
        cons.close()


def _stamp(message: Any) -> int:
    """The original's timestamp for its copy (0: none, the producer stamps the copy)."""
    return kafka_client.message_timestamp_ms(message) or 0


def _abort(prod: Any) -> None:
    """Abort an open transaction at once, best effort (else the next publisher or the broker's
    timeout aborts it: nothing of it is ever visible either way)."""
    try:
        prod.abort_transaction(5.0)
    except Exception as exc:  # no transaction open, or the broker gone: nothing to do
        log.debug("committed feed: abort after an error: %s", exc)


def _commit(
    prod: Any,
    progress_topic: str,
    progress: Mapping[int, int],
    tracker: kafka_client.DeliveryTracker,
    timeout: float,
) -> None:
    """Add the progress record and commit: the copies and the progress become visible together."""
    prod.produce(progress_topic, key=PROGRESS_KEY, value=encode_progress(progress), partition=0)
    pause_point("feed:copied")
    prod.commit_transaction(timeout)  # flushes first; fails (nothing visible) if any record failed
    tracker.raise_for_errors(f"committed feed '{progress_topic}'")
