"""Event triggers of a LogStore table, for event-driven scheduling (``Asset(watchers=[AssetWatcher(...)])``).

- :class:`LogStoreCommitTrigger` fires when the table commits a dual-write snapshot (compaction and
  base snapshots never count): a DAG scheduled on it publishes visibility (``dags/logstore_publish.py``).
- :class:`LogStoreVisibleTrigger` fires when the table's visibility watermark advances. It tails the
  control topic (a :class:`~airflow_logstore.read.follow.ControlFollower`: the latest checkpoint, then
  the records after it), whoever published; its payload carries the previous and the new watermark and
  the commits that became visible (:func:`~airflow_logstore.core.windows.visible_payload`). DAGs
  scheduled on it read exactly the offsets the event made visible
  (:class:`~airflow_logstore.operators.read_visible.LogStoreReadVisibleOperator`).

Both run in the triggerer for as long as an asset watches them and never end. An error (a catalog or
broker that is down, a table not created yet) yields no event: every event becomes a DAG run. It is
logged and the poll is tried again, waiting ``poll_interval`` doubled per failed attempt in a row (at
most ``max_backoff``), with new clients.

**Restarts.** A trigger is rebuilt from its ``serialize()`` arguments when the triggerer restarts;
what it learnt while running is lost. The commit trigger therefore looks, when it starts, for commits
that are not visible yet and fires once for them: nothing committed waits for the next commit after a
restart. The visible trigger starts from the watermark it last fired up to when Airflow's asset state
store has it (Airflow 3.3+, one asset per trigger), else from the current watermark. Either way a run
reads its window from the asset's stored events (:mod:`airflow_logstore.core.windows`), so an event a
restart repeats or loses changes no record a downstream run reads; the state store only lets a change
published while the triggerer was down reach downstream at once instead of with the next advance.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_logstore.core.windows import COMMIT_EVENT, visible_payload
from airflow_logstore.exceptions import classify, first_line
from airflow_logstore.pause import pause_point

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_logstore.core.summary import CommitInfo
    from airflow_logstore.read.follow import ControlFollower
    from airflow_logstore.table.tables import LogStoreTable

#: Longest wait between two attempts after errors (the backoff doubles up to it).
MAX_BACKOFF_S = 60.0
#: The visible trigger's key in Airflow's asset state store: the watermark it last fired up to.
STATE_KEY = "logstore_visible_watermark"
#: The waits between reads of the asset state store at start while it cannot be reached (an API server
#: restarting takes its time): after the last, the trigger runs without it.
STORE_RETRY_DELAYS = (5.0, 15.0, 40.0)
#: What Airflow's accessors raise when several assets share this trigger: no read can fix it.
SHARED_TRIGGER_ERROR = "inlets and outlets"


class _TableEventTrigger(BaseEventTrigger):
    """The loop both triggers share: poll in a thread, yield what the poll found, log and retry errors.

    The loop's clock and sleep are attributes (``clock``, ``sleep``) so that tests can drive it; a poll
    holds ``_lock`` so that :meth:`cleanup` never closes a client a poll still uses.
    """

    def __init__(
        self,
        *,
        table: str,
        logstore_conn_id: str = "logstore_default",
        kafka_config_id: str | None = "kafka_default",
        poll_interval: float = 2.0,
        max_backoff: float = MAX_BACKOFF_S,
    ) -> None:
        super().__init__()
        self.table = table
        self.logstore_conn_id = logstore_conn_id
        self.kafka_config_id = kafka_config_id
        self.poll_interval = poll_interval
        self.max_backoff = max_backoff
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
        self._lock = threading.Lock()
        self._table_handle: LogStoreTable | None = None
        #: errors in a row so far (for tests and logs)
        self.failed_attempts = 0

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "logstore_conn_id": self.logstore_conn_id,
                "kafka_config_id": self.kafka_config_id,
                "poll_interval": self.poll_interval,
                "max_backoff": self.max_backoff,
            },
        )

    def _handle(self) -> LogStoreTable:
        """The table through the connections, built once per run of clients (:meth:`reset` drops it)."""
        from airflow_logstore.hooks.logstore import LogStoreHook

        if self._table_handle is None:
            self._table_handle = LogStoreHook(self.logstore_conn_id, self.kafka_config_id).table(self.table)
        return self._table_handle

    def backoff(self, failed_attempts: int) -> float:
        """Seconds to wait after the ``failed_attempts``-th failed attempt in a row."""
        return float(min(self.max_backoff, self.poll_interval * 2 ** (failed_attempts - 1)))

    def poll_once(self) -> list[dict[str, Any]]:
        """One look (blocking): the payloads of the events to fire now, oldest first."""
        raise NotImplementedError

    def idle_delay(self) -> float:
        """Seconds to wait after a poll that went well (the poll itself may have waited already)."""
        return self.poll_interval

    def reset(self) -> None:
        """Drop the clients after an error: the next poll builds new ones."""

    def _locked_poll(self) -> list[dict[str, Any]]:
        with self._lock:
            return self.poll_once()

    def _locked_reset(self) -> None:
        with self._lock:
            self._table_handle = None
            self.reset()

    async def started(self) -> None:
        """Called once before the first poll (e.g. to read the asset state store)."""

    async def fired(self, payload: dict[str, Any]) -> None:
        """Called after each event was handed to the triggerer."""

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await self.started()
        while True:
            try:
                payloads = await asyncio.to_thread(self._locked_poll)
            except Exception as exc:
                self.failed_attempts += 1
                delay = self.backoff(self.failed_attempts)
                error_class, _ = classify(exc)
                self.log.warning(
                    "watching %s failed (%s: %s; %s in a row); no event, retrying in %.1fs",
                    self.table,
                    error_class,
                    first_line(exc),
                    self.failed_attempts,
                    delay,
                )
                await asyncio.to_thread(self._locked_reset)
                pause_point("events:poll-failed")  # no event for it; retried after the delay
                await self.sleep(delay)
                continue
            self.failed_attempts = 0
            for payload in payloads:
                yield TriggerEvent(payload)
                await self.fired(payload)
            delay = self.idle_delay()
            if delay > 0:
                await self.sleep(delay)

    async def cleanup(self) -> None:
        await asyncio.to_thread(self._locked_reset)


class LogStoreCommitTrigger(_TableEventTrigger):
    """Fires when ``table`` commits dual-write snapshots: one event per poll that found new ones.

    Reads only the table's metadata (pyiceberg) per poll. When it starts it also reads the control state
    once and fires for the commits that are not visible yet (``"unpublished": true``), so that a restart
    never leaves a commit waiting for the next one.

    Payload: ``event`` (``logstore.commit``), ``table``, ``snapshot_id`` (``main`` when it looked),
    ``commits`` (each as the sensor's XCom: snapshot, writer, batch, epoch, offsets, commit time),
    ``unpublished``, ``observed_at_ms``.

    :param table: ``namespace.table``
    :param poll_interval: seconds between two looks at the table's metadata
    :param max_backoff: longest wait between attempts after errors
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: the sequence number of ``main`` when it last looked (None: not yet)
        self._seen_sequence: int | None = None
        #: the table's uuid when it last looked: a table dropped and created again has another
        self._table_uuid: str | None = None

    def poll_once(self) -> list[dict[str, Any]]:
        from airflow_logstore.table.tables import snapshot_commits

        handle = self._handle()
        table = handle.load()
        uuid = str(table.metadata.table_uuid)
        if self._table_uuid is not None and uuid != self._table_uuid:
            self.log.warning(
                "%s was dropped and created again (table uuid %s, was %s): looking at it as at a start",
                self.table,
                uuid,
                self._table_uuid,
            )
            self._seen_sequence = None  # its sequence numbers start again
        self._table_uuid = uuid
        current = table.current_snapshot()
        commits = snapshot_commits(table)
        head = current.sequence_number if current is not None and current.sequence_number else 0
        if self._seen_sequence is None:
            pending = _not_visible(handle, table, commits)
            self._seen_sequence = head
            if pending:
                self.log.info("%s has %s commits not visible yet: firing for them", self.table, len(pending))
            return [self._payload(pending, current, unpublished=True)] if pending else []
        new = [c for c in commits if (c.sequence_number or 0) > self._seen_sequence]
        self._seen_sequence = max(self._seen_sequence, head)
        return [self._payload(new, current, unpublished=False)] if new else []

    def _payload(self, commits: list[CommitInfo], current: Any, *, unpublished: bool) -> dict[str, Any]:
        from airflow_logstore.table.snapshots import commit_xcom

        return {
            "event": COMMIT_EVENT,
            "table": self.table,
            "snapshot_id": current.snapshot_id if current is not None else None,
            "commits": [commit_xcom(c, self.table) for c in commits],
            "unpublished": unpublished,
            "observed_at_ms": int(time.time() * 1000),
        }


def _not_visible(handle: LogStoreTable, table: Table, commits: list[CommitInfo]) -> list[CommitInfo]:
    """The commits of ``commits`` (of ``table``, as loaded) whose log records are not all at or below the
    watermark."""
    if not any(c.offsets for c in commits):
        return []
    watermark = handle.log_side(table).control.read().watermark
    return [
        c
        for c in commits
        if c.offsets and not all(watermark.get(p, -1) >= last for p, (_, last) in c.offsets.items())
    ]


class LogStoreVisibleTrigger(_TableEventTrigger):
    """Fires when the visibility watermark of ``table`` advances, whoever published.

    Tails the control topic: the first poll reads the latest checkpoint and every control record up to
    the topic's end (the watermark it starts from), later polls wait up to ``poll_interval`` for new
    records. A watermark that moved fires one event, its payload
    (:func:`~airflow_logstore.core.windows.visible_payload`) carrying the previous and the new watermark
    as offsets (``from``, ``to``: the records in between are the ones that became visible) and the
    commits that became visible.

    :param table: ``namespace.table`` (its log must be enabled)
    :param poll_interval: longest wait for new control records per poll (the latency of an event)
    :param max_backoff: longest wait between attempts after errors
    """

    def __init__(self, *, poll_interval: float = 0.5, **kwargs: Any) -> None:
        super().__init__(poll_interval=poll_interval, **kwargs)
        self._follower: ControlFollower | None = None
        self._partitions: list[int] = []
        #: the watermark up to which events were fired (None: not started)
        self._fired: dict[int, int] | None = None
        #: the control topic's id that ``_fired`` belongs to (None: not known)
        self._topic_id: str | None = None
        self._stored: dict[int, int] | None = None
        self._stored_topic_id: str | None = None
        self._store: Any = None
        self.store_retry_delays = STORE_RETRY_DELAYS  # tests set shorter ones

    def idle_delay(self) -> float:
        return 0.0  # the poll waited for control records already

    async def started(self) -> None:
        """Read the watermark to start from from Airflow's asset state store (3.3+), if any: where the
        last event this trigger handed over started (:meth:`fired`)."""
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return
        delays = list(self.store_retry_delays)
        while True:
            try:
                stored = await store.aget(STATE_KEY)
                break
            except Exception as exc:
                if (isinstance(exc, ValueError) and SHARED_TRIGGER_ERROR in str(exc)) or not delays:
                    return self._without_store(exc)  # several assets share this trigger, or no more tries
                delay = delays.pop(0)
                self.log.warning(
                    "%s: reading the asset state store failed (%s: %s); retrying in %.0fs (%s more tries)",
                    self.table,
                    type(exc).__name__,
                    first_line(exc),
                    delay,
                    len(delays) + 1,
                )
                await self.sleep(delay)
        self._store = store
        if isinstance(stored, dict):
            # {"watermark": {...}, "control_topic_id": ...}; before it, the watermark alone
            marks = stored.get("watermark", stored)
            self._stored = {int(p): int(o) for p, o in dict(marks or {}).items()}
            self._stored_topic_id = stored.get("control_topic_id") if "watermark" in stored else None
            self.log.info(
                "%s: starting from where the last event handed over started, %s", self.table, stored
            )

    def _without_store(self, exc: Exception) -> None:
        self.log.warning(
            "%s: not keeping the fired watermark in the asset state store (%s: %s); after a restart, "
            "changes published meanwhile reach downstream with the next advance",
            self.table,
            type(exc).__name__,
            first_line(exc),
        )

    async def fired(self, payload: dict[str, Any]) -> None:
        """Keep the watermark *before* the event just handed over, not after it.

        A trigger hands an event to the triggerer, which stores it in the database a moment later: a
        triggerer killed in between loses it, and a trigger that kept the watermark after it would start
        past it and fire nothing for it until the next advance (never, on a table that stops changing).
        Kept one event behind, a restarted trigger fires again at once for the last event's range (and
        whatever moved since): if the lost event was stored after all, the repeat's window reads nothing
        new (E1); if it was lost, the repeat's window reads it (and any earlier lost one: a window starts
        where the stored events stopped). The cost: after a restart, at most one downstream run with an
        empty window."""
        if self._store is None:
            return
        before = {str(p): int(o) - 1 for p, o in payload["from"].items()}
        try:
            await self._store.aset(
                STATE_KEY, {"watermark": before, "control_topic_id": payload.get("control_topic_id")}
            )
        except Exception as exc:  # a restart then starts from an older event: repeats, none lost
            self.log.warning("%s: could not store the fired watermark: %s", self.table, first_line(exc))

    def open_follower(self) -> tuple[ControlFollower, list[int]]:
        """A control follower caught up with the control topic's end, and the log's partitions."""
        from airflow_logstore.read.follow import ControlFollower
        from airflow_logstore.read.reader import LogReader

        reader = LogReader(self._handle(), consistency="consistent")
        end = reader.control.end_offset()
        follower = ControlFollower.of(reader)
        try:
            while follower.next < end:
                before = follower.next
                follower.poll(timeout=1.0)
                if follower.next == before:
                    follower.poll(timeout=5.0)  # a slow fetch, or compaction left a gap at the end
                    if follower.next == before:
                        break  # what is left below the end cannot be read: start from here
        except BaseException:
            follower.close()
            raise
        return follower, list(range(reader.config.partitions))

    def _start(self) -> ControlFollower:
        """Open the follower; the first time, take the watermark to start from. A control topic with
        another id than the one the fired watermark belongs to (the table was dropped and created again:
        its offsets start again) is watched from its beginning: every advance on it fires."""
        follower, self._partitions = self.open_follower()
        topic_id = getattr(follower, "started_topic_id", None)
        if self._fired is None:
            stored = self._stored
            if stored is not None and self._recreated(self._stored_topic_id, topic_id):
                stored = {}  # the stored watermark is of the table's earlier life
            self._fired = dict(stored if stored is not None else follower.state.watermark)
            self.log.info("%s: watching the watermark from %s", self.table, self._fired)
            pause_point("events:watching")  # what it fires for from now on is fixed
        elif self._recreated(self._topic_id, topic_id):
            self._fired = {}
        if topic_id is not None:  # a topic missing for a moment (being created again) says nothing
            self._topic_id = topic_id
        return follower

    def _recreated(self, known: str | None, now: str | None) -> bool:
        """Whether the control topic ``now`` is another than the ``known`` one (logged once when so)."""
        if known is None or now is None or known == now:
            return False
        self.log.warning(
            "%s: its control topic was created again (id %s, was %s: the table was dropped and created "
            "again); firing for every advance on the new one from its start",
            self.table,
            now,
            known,
        )
        return True

    def poll_once(self) -> list[dict[str, Any]]:
        from airflow_logstore.core.visibility import newly_visible_commits

        if self._follower is None:
            self._follower = self._start()
        else:
            self._follower.poll(timeout=self.poll_interval)
        assert self._fired is not None
        state = self._follower.state
        watermark = state.watermark
        if not any(o > self._fired.get(p, -1) for p, o in watermark.items()):
            return []
        before = dict(self._fired)
        after = {p: max(watermark.get(p, -1), before.get(p, -1)) for p in set(watermark) | set(before)}
        payload = visible_payload(
            self.table,
            before,
            after,
            self._partitions,
            commits=newly_visible_commits(state, before, after),
            control_offset=self._follower.next - 1,
            observed_at_ms=int(time.time() * 1000),
            control_topic_id=self._topic_id,
        )
        self._fired = after
        return [payload]

    def reset(self) -> None:
        if self._follower is not None:
            follower, self._follower = self._follower, None
            follower.close()
