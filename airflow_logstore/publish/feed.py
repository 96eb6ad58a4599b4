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

from airflow_logstore.core.closing import Closing
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
    """Copy the records that are visible at ``watermark`` and not yet in the feed, once (a one-shot
    :class:`FeedCopier`: it takes the feed's token, copies, and lets go)."""
    with FeedCopier(side) as copier:
        return copier.copy(state, watermark, log_start)


class FeedCopier(Closing):
    """Copies a table's newly visible records to its committed feed, publish after publish, holding the
    feed's token (its transactional producer) between copies (see the module for one copy's steps).

    **Holding the token.** The producer's ``init_transactions`` runs once; the progress is read from the
    progress topic once, right after it. While this copier holds the token no other publisher commits a
    transaction of the feed (taking the token fences this one first), so the feed's progress stays the
    one this copier committed last, which it keeps in memory: a read of the topic right after a commit
    could still return the progress before it (the commit's markers are written after
    ``commit_transaction`` returns), and would copy a range twice. When another publisher took the
    token, this copier's next transaction fails: it drops the producer and the progress it kept and
    raises :class:`~airflow_logstore.exceptions.FencedError`; its next copy takes the token again (which
    fences the other) and reads the progress after it. Any other failure drops them too (the open
    transaction aborted). So every copy's range starts where the last committed one ended.
    """

    def __init__(self, side: LogSide) -> None:
        self.side = side
        self._prod: Any = None
        self._progress: dict[int, int] | None = None  # the feed's committed progress while holding the token
        self._cons: Any = None  # the log consumer of the copies' scans
        self.tokens_taken = 0  # how often this copier took the token (for reports and tests)

    def copy(
        self, state: ControlState, watermark: Mapping[int, int], log_start: Mapping[int, int]
    ) -> dict[str, Any]:
        """Copy the records visible at ``watermark`` and not yet in the feed.

        :param state: the control state ``watermark`` was decided on (every record below it is decided).
        :param log_start: per log partition its first offset, read before ``state``.
        :returns: the copy in numbers: ``copied``, the other decisions, ``transactions``, the progress.
        :raises FencedError: a newer publisher took the feed's token meanwhile (it copies these records).
        """
        side = self.side
        ensure_feed_topics(side.kafka_config, side.config)
        topic, progress_topic = side.config.feed_topics()
        timeout = kafka_client.request_timeout(None)
        try:
            if self._prod is None or self._progress is None:
                self._take_token(progress_topic, timeout)
            prod, progress = self._prod, dict(self._progress or {})
            span = copy_range(progress, watermark, log_start)
            if span.gaps:
                log.warning(
                    "committed feed '%s': retention deleted log records before they were copied: %s",
                    topic,
                    {str(p): list(gap) for p, gap in span.gaps.items()},
                )
            report: dict[str, Any] = {
                "transactions": 0,
                "gaps": {str(p): list(g) for p, g in span.gaps.items()},
            }
            if span.empty and not span.gaps:  # a gap is passed once: its progress is committed
                report["progress"] = {str(p): o for p, o in sorted(span.start.items())}
                return report
            copy = FeedCopy(state, watermark, span.start)
            if self._cons is None:
                # records retention deletes while the scan runs fail the copy (retryable), never pass unseen
                self._cons = kafka_client.consumer(
                    side.kafka_config, **{"auto.offset.reset": "error", "fetch.wait.max.ms": 5}
                )
            _copy(
                self._cons,
                side.topic,
                prod,
                copy,
                span.start,
                span.end,
                topic,
                progress_topic,
                report,
                timeout,
            )
            self._progress = dict(copy.progress)  # the progress record just committed
            report.update(copy.counts)
            report["progress"] = {str(p): o for p, o in sorted(copy.progress.items())}
            return report
        except Exception as exc:
            self._drop(abort=not kafka_client.is_fenced(exc))
            if kafka_client.is_fenced(exc):
                raise FencedError(
                    f"committed feed '{topic}': a newer publisher took the feed's transactional id while "
                    "this one copied; its open copy was aborted and the newer publisher copies those records"
                ) from exc
            raise

    def _take_token(self, progress_topic: str, timeout: float) -> None:
        """Take the feed's token (fencing every earlier holder), *then* read the feed's progress."""
        self._drop(abort=False)
        self._prod = kafka_client.transactional_producer(
            self.side.kafka_config,
            feed_transactional_id(self.side.topic),
            **{
                "linger.ms": 0,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
            },
        )
        kafka_client.init_transactions(self._prod, timeout)  # fences every earlier publisher of the feed
        self.tokens_taken += 1
        pause_point("feed:token-taken")
        self._progress = read_progress(self.side.kafka_config, progress_topic)  # after the token

    def _drop(self, *, abort: bool) -> None:
        """Let go of the producer (its open transaction aborted when ``abort``) and the kept progress."""
        prod, self._prod, self._progress = self._prod, None, None
        if prod is not None:
            if abort:
                _abort(prod)
            prod.purge()

    def close(self) -> None:
        self._drop(abort=False)
        if self._cons is not None:
            self._cons.close()
            self._cons = None


def _copy(
    cons: Any,
    log_topic: str,
    prod: Any,
    copy: FeedCopy,
    start: Mapping[int, int],
    end: Mapping[int, int],
    topic: str,
    progress_topic: str,
    report: dict[str, Any],
    timeout: float,
) -> None:
    """Scan ``start``..``end`` of ``log_topic`` with ``cons`` and commit the copies with their progress,
    a transaction per chunk."""
    tracker = kafka_client.DeliveryTracker()
    pending = 0
    prod.begin_transaction()
    for batch in kafka_client.scan(cons, log_topic, start, end, poll_timeout=0.01):
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
