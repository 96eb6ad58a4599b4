"""A table's control topic: writer epochs, ledger entries, the visibility watermark, leases, and the
checkpoints of its folded state.

One partition, compacted, stamped by the broker (``LogAppendTime``). Its state is read as "the latest
checkpoint + the records after it" (:func:`read_state`); every append goes through the one produce loop
of :mod:`airflow_logstore.log.kafka_client`.

**Checkpoints.** A table's control topic ``<control>`` has a checkpoint topic ``<control>-checkpoint``
(one partition, compacted, one key): its last record is the latest checkpoint, the state folded up to a
control-topic offset ``through`` (see :mod:`airflow_logstore.core.checkpoint`). Reading the control
state is then "the last checkpoint record + the control records after ``through``": its cost follows
the tail, not the table's age.

Publishing writes a checkpoint once the tail is :data:`CHECKPOINT_EVERY` records long; on the way it
retires ledger entries whose records retention deleted, writing the checkpoint first and the entries'
tombstones once readers take it (a crash in between leaves the entries in place, which is harmless), and
tombstones the watermark records the checkpoint holds.

**Checkpoints only move forward** (a compare-and-set on ``through``). Publishes overlap, and a stalled
one could otherwise write a checkpoint older than the latest after it: compaction then removes the
ledger entries the newer one retired (their tombstones), and the older one does not know them. Every
checkpointer of a table shares one Kafka transactional id (:func:`checkpointer_id`): it first takes the
id (``init_transactions``, which fences every earlier holder and aborts its open transaction), *then*
reads the control state, and commits its checkpoint in a transaction, which fails if a newer
checkpointer took the id meanwhile. A committed checkpoint was therefore computed from a read made after
every earlier committed checkpoint. Readers take the last *committed* checkpoint
(:func:`~airflow_logstore.log.kafka_client.last_committed`).
"""

from __future__ import annotations

import itertools
import json
import logging
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from airflow_logstore.core import control
from airflow_logstore.core.checkpoint import Checkpoint, retire
from airflow_logstore.core.closing import Closing
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.records import EpochClaim, Payload, as_json
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.exceptions import ControlTopicChangedError, TopicError
from airflow_logstore.log import kafka_client
from airflow_logstore.pause import pause_point

log = logging.getLogger(__name__)

CONTROL_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "min.compaction.lag.ms": str(24 * 3600 * 1000),
    "retention.ms": "-1",
    # the protocol's only source of truth: an out-of-sync replica must never become its leader
    "unclean.leader.election.enable": "false",
    # the broker stamps every record: leases are judged by these timestamps, not by hosts' clocks
    "message.timestamp.type": "LogAppendTime",
}
#: Settings an existing control topic is brought to (the others are only set on creation).
CONTROL_TOPIC_ENFORCED = ("unclean.leader.election.enable", "message.timestamp.type")
#: Records that move the control topic's end past an epoch floor (tombstones of one key: compacted away).
EPOCH_FILL_KEY = "epoch-fill"
#: The most filler records one claim writes; a larger gap is an error that asks for a look first.
MAX_EPOCH_FILL = 5_000_000


class ControlTopic:
    """Reads and appends to a table's control topic (single partition, compacted).

    :param epoch_floor: per writer the highest epoch the table already recorded (its snapshot
        summaries); :meth:`claim_epoch` never hands out an epoch at or below it.
    """

    def __init__(
        self, config: Mapping[str, Any], topic: str, epoch_floor: Callable[[str], int] | None = None
    ) -> None:
        self.config = dict(config)
        self.topic = topic
        self.epoch_floor = epoch_floor
        self._id: str | None = None
        self._id_known = False

    def ensure(self, replication_factor: int | None = None) -> bool:
        _, created = kafka_client.ensure_topic(
            self.config,
            self.topic,
            partitions=1,
            replication_factor=replication_factor,
            topic_configs=CONTROL_TOPIC_CONFIGS,
        )
        if not created:
            self._enforce_configs()
        return created

    def _enforce_configs(self) -> None:
        """Bring an existing control topic (created before them) to :data:`CONTROL_TOPIC_ENFORCED`."""
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        info = kafka_client.describe_topic(self.config, self.topic)
        wanted = {key: CONTROL_TOPIC_CONFIGS[key] for key in CONTROL_TOPIC_ENFORCED}
        changes = {k: v for k, v in wanted.items() if info is None or info.configs.get(k) != v}
        if not changes:
            return
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.items()]
        resource = ConfigResource(ConfigResource.Type.TOPIC, self.topic, incremental_configs=entries)
        admin = kafka_client.admin_client(self.config)  # kept until the result: a dropped client cancels it
        admin.incremental_alter_configs([resource])[resource].result(timeout=30.0)
        log.warning("control topic '%s': set %s (it was created without them)", self.topic, changes)

    def topic_id(self) -> str | None:
        """The id Kafka gave the control topic when it was created (another one after a delete and
        re-create under the same name); None when the topic does not exist. Asked anew each time."""
        self._id, self._id_known = kafka_client.topic_id(self.config, self.topic), True
        return self._id

    def known_id(self) -> str | None:
        """:meth:`topic_id`, asked once for this object (a checkpoint names the topic it was made of)."""
        return self._id if self._id_known else self.topic_id()

    def check_claim(
        self, state: control.ControlState, writer_id: str, epoch: int, claimed_in: str | None
    ) -> None:
        """Raise :class:`ControlTopicChangedError` unless ``state`` (read just before) comes from the
        topic ``epoch`` of ``writer_id`` was claimed in (id ``claimed_in``) and holds that claim.

        A topic deleted and re-created while the writer ran holds no claim of this epoch: its records
        look foreign there (a publish settles them as such) and, without this check, the attempt would
        decide that it may commit.
        """
        now = self.topic_id()
        latest = state.latest_epoch(writer_id)
        if now != claimed_in or latest is None or latest < epoch:
            raise ControlTopicChangedError(
                f"control topic '{self.topic}' is not the one writer '{writer_id}' claimed epoch {epoch} "
                f"in: its id was {claimed_in} then and is {now} now, and its newest claim of the writer is "
                f"{latest} (was it deleted and re-created?); this attempt stops before committing, its "
                "records are left uncommitted; run the batch again to claim an epoch in the topic as it is"
            )

    def read(self) -> control.ControlState:
        """The control state up to the topic's end at call time: the latest checkpoint (see
        :func:`read_state`) with every record after it folded on."""
        return read_state(self)

    def reader(self) -> ControlReader:
        """A reader that reads this state again and again through one consumer (:class:`ControlReader`)."""
        return ControlReader(self)

    def append(self, key: str, value: Payload | Mapping[str, Any] | None) -> int:
        """Write one record durably and return its offset (a typed payload of :mod:`.core.records`,
        a ledger entry's or reconciler record's JSON, or None for a tombstone)."""
        data = as_json(value)
        tracker = kafka_client.DeliveryTracker()
        with kafka_client.shared_producer(self.config, **{"linger.ms": 0}) as prod:
            prod.produce(
                self.topic, key=key.encode(), value=control.encode(data), partition=0, on_delivery=tracker
            )
            kafka_client.flush(prod, tracker, 1, f"control topic '{self.topic}'", timeout=60.0)
        return tracker.offsets[0][0]

    def append_tombstones(self, keys: list[str]) -> None:
        """Tombstone ``keys``, with one flush: a checkpoint's retired entries and watermark moves (about
        a hundred), which one append each kept the next publish waiting for a round trip apiece."""
        tracker = kafka_client.DeliveryTracker()
        tombstones: list[kafka_client.Outgoing] = [(key.encode(), None, 0, None) for key in keys]
        with kafka_client.shared_producer(self.config, **{"linger.ms": 0}) as prod:
            kafka_client.produce_each(prod, self.topic, tombstones, tracker)
            kafka_client.flush(prod, tracker, len(keys), f"control topic '{self.topic}' (tombstones)")

    def claim_epoch(self, writer_id: str, owner: str = "", floor: int | None = None) -> int:
        """A new epoch for ``writer_id``: above every earlier claim and above ``floor``.

        The epoch is the claim's offset + 1 (see core.control), so claims only regress when the
        control topic was lost and recreated: its offsets start again at 0 while the table's snapshot
        summaries still carry the epochs that committed. An epoch at or below those would make a new
        attempt look older than a zombie. So the topic's end is first moved past the floor with filler
        records, then the claim is appended; offsets only grow, so its epoch is above the floor by
        construction (checked all the same). Filling, not failing: a writer recovers by itself, once.

        :param floor: the highest epoch already recorded for the writer; by default asked of
            ``epoch_floor`` (0 without one).
        :raises TopicError: the gap is larger than :data:`MAX_EPOCH_FILL` records, or the claim still
            landed at or below the floor (the topic was recreated once more meanwhile).
        """
        if floor is None:
            floor = self.epoch_floor(writer_id) if self.epoch_floor is not None else 0
        self._fill_to(floor, writer_id)
        offset = self.append(
            control.epoch_key(writer_id), EpochClaim(writer_id, owner, kafka_client.now_ms())
        )
        if offset + 1 <= floor:
            raise TopicError(
                f"control topic '{self.topic}': epoch claim {offset + 1} of writer '{writer_id}' is "
                f"not above epoch {floor} the table already recorded; the topic was recreated meanwhile"
            )
        return offset + 1

    def end_offset(self) -> int:
        cons = kafka_client.consumer(self.config)
        try:
            return kafka_client.partition_offsets(cons, self.topic, 1)[0][1]
        finally:
            cons.close()

    def _fill_to(self, floor: int, writer_id: str) -> None:
        """Append filler records until the next offset is at least ``floor`` (the next epoch above it)."""
        end = self.end_offset() if floor > 0 else 0
        missing = floor - end
        if missing <= 0:
            return
        if missing > MAX_EPOCH_FILL:
            raise TopicError(
                f"control topic '{self.topic}' ends at offset {end}, but the table recorded epoch "
                f"{floor} of writer '{writer_id}': the control topic was lost or recreated, and {missing} "
                f"filler records (more than {MAX_EPOCH_FILL}) would be needed to keep epochs growing; "
                "restore the topic"
            )
        log.warning(
            "control topic '%s' ends at offset %s below epoch %s that the table recorded for writer '%s' "
            "(was it recreated?): appending %s filler records so that epochs keep growing",
            self.topic,
            end,
            floor,
            writer_id,
            missing,
        )
        self.append_fill(missing)

    def append_fill(self, count: int) -> None:
        """Append ``count`` filler tombstones (ignored by readers, removed by compaction)."""
        tracker = kafka_client.DeliveryTracker()
        fill: kafka_client.Outgoing = (EPOCH_FILL_KEY.encode(), None, 0, None)
        with kafka_client.shared_producer(self.config, **{"linger.ms": 5}) as prod:
            kafka_client.produce_each(prod, self.topic, itertools.repeat(fill, count), tracker)
            kafka_client.flush(
                prod, tracker, count, f"control topic '{self.topic}' (epoch fill)", timeout=600.0
            )

    def record_commit(self, commit_json: Mapping[str, Any], writer_id: str, batch_id: int) -> int:
        """Append a ledger entry (under :func:`~airflow_logstore.core.control.ledger_key`)."""
        commit = CommitInfo.from_json(commit_json)
        assert (commit.writer_id, commit.batch_id) == (writer_id, batch_id)
        return self.append(control.ledger_key(commit), commit_json)


# --- checkpoints of the control state ------------------------------------------------------------------

#: A publish writes a new checkpoint once this many control records follow the last one.
CHECKPOINT_EVERY = 200
CHECKPOINT_KEY = b"checkpoint"
CHECKPOINT_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "unclean.leader.election.enable": "false",
    "max.message.bytes": str(16 * 1024 * 1024),
}


def checkpoint_topic(control_topic: str) -> str:
    return f"{control_topic}-checkpoint"


def latest_checkpoint(ctl: ControlTopic) -> tuple[ControlState, int]:
    """(the latest checkpoint's state, the control offset to fold on from); an empty state and 0 when
    there is none, or when it does not fit the control topic (recreated since).

    :raises TopicError: the latest checkpoint does not decode. Never a read of the whole control topic
        instead: once entries are retired, compaction removes them from the control topic and only the
        checkpoint still knows those batches are committed (a retried old batch would commit again).
    """
    cons = _consumer(ctl)
    try:
        control_end = kafka_client.partition_offsets(cons, ctl.topic, 1)[0][1]
        return _latest(ctl, cons, control_end)
    finally:
        cons.close()


def read_state(ctl: ControlTopic) -> ControlState:
    """The control state: the latest checkpoint with every control record after it folded on."""
    with ControlReader(ctl) as reader:
        return reader.read()


class ControlReader(Closing):
    """Reads one table's control state again and again through one consumer (a long-lived publisher).

    The first :meth:`read` is :func:`read_state`'s: the latest checkpoint with the records after it
    folded on. Each later read folds only the records appended since onto the state it returned last
    (folding is in offset order, so folding ``a..b`` then ``b..c`` is folding ``a..c``), and every read
    still reads to the topic's end *at call time*, as the protocol's order asks. A later read is a whole
    read again when the kept state cannot be continued: an offset it had not folded is gone (compaction
    removed it: a jump in the offsets, or the topic's start past them), or the topic ends before what
    it folded (re-created). :meth:`reset` makes the next read a whole one (after a checkpoint, so that
    ``checkpoint_start`` is the latest checkpoint's again).

    The state returned is folded onto in place by the next read: use it until then, or copy it.
    """

    def __init__(self, ctl: ControlTopic) -> None:
        self.ctl = ctl
        self._cons: Any = None
        self._state: ControlState | None = None
        self._next = 0  # the control offset the next incremental read folds from
        self.whole_reads = 0  # how many reads were whole ones (for reports and tests)

    def read(self) -> ControlState:
        """The control state up to the topic's end at call time."""
        if self._cons is None:
            self._cons = _consumer(self.ctl)
        low, end = kafka_client.partition_offsets(self._cons, self.ctl.topic, 1)[0]
        kept, self._state = self._state, None  # kept again only once a read is complete
        if kept is not None and low <= self._next <= end:
            records, whole = self._records(self._next, end)
            if whole:  # no offset this state had not folded is gone: fold on (never a partial fold)
                return self._keep(control.fold(records, kept), end)
        state, start = _latest(self.ctl, self._cons, end)
        state.checkpoint_start = start
        records, _ = self._records(max(start, low), end)  # compacted offsets: the checkpoint's rule
        self.whole_reads += 1
        return self._keep(control.fold(records, state), end)

    def _records(self, start: int, end: int) -> tuple[list[control.ControlRecord], bool]:
        """The control records of ``start``..``end``, and whether every offset of it was there."""
        records = []
        following = start
        whole = True
        for batch in kafka_client.scan(self._cons, self.ctl.topic, {0: start}, {0: end}):
            for message in batch:
                offset = message.offset()
                whole = whole and offset == following
                following = offset + 1
                stamp = kafka_client.message_timestamp_ms(message)
                record = control.decode(message.key(), message.value(), offset, stamp)
                if record is not None:
                    records.append(record)
        return records, whole and following >= end

    def _keep(self, state: ControlState, end: int) -> ControlState:
        self._state, self._next = state, end
        return state

    def reset(self) -> None:
        """Make the next read a whole one."""
        self._state = None

    def close(self) -> None:
        if self._cons is not None:
            self._cons.close()
            self._cons = None


def _consumer(ctl: ControlTopic) -> Any:
    """One consumer for the checkpoint and the tail. Short fetch waits: the broker answers a fetch
    at the end of a partition only after ``fetch.wait.max.ms``, and the next request waits behind it."""
    return kafka_client.consumer(ctl.config, **{"fetch.max.bytes": 64 * 1024 * 1024, "fetch.wait.max.ms": 5})


def _committed_consumer(ctl: ControlTopic) -> Any:
    """A read-committed consumer of the checkpoint topic (short fetch waits, as :func:`_consumer`)."""
    return kafka_client.committed_consumer(ctl.config, **{"fetch.wait.max.ms": 5})


def _latest(ctl: ControlTopic, cons: Any, control_end: int) -> tuple[ControlState, int]:
    """The latest committed checkpoint (through ``cons``'s connection for the topic check, and a
    read-committed consumer of its own for the record)."""
    topic = checkpoint_topic(ctl.topic)
    found = cons.list_topics(topic=topic, timeout=kafka_client.request_timeout(None)).topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        return ControlState(), 0  # no checkpoint yet
    committed = _committed_consumer(ctl)
    try:
        message = kafka_client.last_committed(committed, topic)
    finally:
        committed.close()
    if message is None:
        return ControlState(), 0
    try:
        checkpoint = _decode(message.value())
    except (ValueError, TypeError, KeyError, zlib.error) as exc:
        raise TopicError(
            f"the latest checkpoint in '{topic}' (offset {message.offset()}) does not decode "
            f"({exc}); the control state of '{ctl.topic}' cannot be read without it: ledger "
            "entries it retired are compacted away in the control topic. Restore a checkpoint "
            "this version reads (a newer LogStore may have written it: upgrade), or, only for a "
            "table whose batches are never run again, delete the checkpoint topic"
        ) from exc
    made_of = checkpoint.control_topic_id
    if checkpoint.through >= control_end or (made_of is not None and made_of != ctl.known_id()):
        log.warning(
            "checkpoint of '%s' (through %s, of the topic with id %s) is of another topic of that name "
            "(the topic was deleted and re-created: its id is %s, its end %s): ignored",
            ctl.topic,
            checkpoint.through,
            made_of,
            ctl.known_id(),
            control_end,
        )
        return ControlState(), 0
    return checkpoint.state, checkpoint.through + 1


def checkpointer_id(control_topic: str) -> str:
    """The Kafka transactional id every checkpointer of the table behind ``control_topic`` shares."""
    return f"logstore-checkpoint-{control_topic}"


#: A checkpointer that dies inside its transaction holds nothing up for long: the broker aborts the
#: transaction after this, and readers never wait for it anyway (they read the last committed one).
TRANSACTION_TIMEOUT_MS = 15_000


def maybe_checkpoint(
    ctl: ControlTopic, state: ControlState, log_start: Mapping[int, int], *, every: int | None = None
) -> dict[str, Any] | None:
    """Write a checkpoint when the tail of ``state`` is long enough; retire what retention deleted.

    The checkpoint is of the control state read *after* this checkpointer took the checkpointers'
    transactional id (see the module docstring), not of ``state``.

    :param state: the state a publish read (:func:`read_state`): it only says whether one is due.
    :param log_start: per log partition its first offset (records below were deleted by retention).
    :param every: the tail length that makes a checkpoint due (default :data:`CHECKPOINT_EVERY`).
    :returns: what was done, in numbers, or None when no checkpoint was due.
    """
    if state.end_offset - state.checkpoint_start < (every or CHECKPOINT_EVERY):
        return None
    topic = checkpoint_topic(ctl.topic)
    kafka_client.ensure_topic(
        ctl.config, topic, partitions=1, replication_factor=None, topic_configs=CHECKPOINT_TOPIC_CONFIGS
    )
    prod = kafka_client.transactional_producer(
        ctl.config,
        checkpointer_id(ctl.topic),
        **{
            "linger.ms": 0,
            "message.max.bytes": 16 * 1024 * 1024,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
        },
    )
    try:
        written = _write_fenced(ctl, prod, topic, log_start)
    finally:
        prod.purge()
    if written is None:
        return {"skipped": "the latest checkpoint is as new as the control state"}
    if "fenced" in written:
        log.info("control checkpoint of '%s': %s", ctl.topic, written["fenced"])
        return written
    kept, gone, through, size = written["kept"], written["gone"], written["through"], written["bytes"]
    report = {"through": through, "bytes": size, "commits": len(kept.commits), "retired": len(gone)}
    if _readable(ctl, topic, written["offset"]):
        ctl.append_tombstones([*gone, *written["watermark_keys"]])
    else:
        report["tombstones"] = "not written: the checkpoint was not readable in time (the entries stay)"
    log.info("control checkpoint of '%s': %s", ctl.topic, report)
    return report


def _write_fenced(
    ctl: ControlTopic, prod: Any, topic: str, log_start: Mapping[int, int]
) -> dict[str, Any] | None:
    """Take the transactional id, read the state, commit its checkpoint (None: not newer than the
    latest; ``{"fenced": ...}``: a newer checkpointer took the id meanwhile)."""
    timeout = kafka_client.request_timeout(None)
    kafka_client.init_transactions(prod, timeout)  # fences every earlier checkpointer of the table
    pause_point("checkpoint:token-taken")
    state = read_state(ctl)  # after the token: newer than every committed checkpoint
    if state.end_offset <= state.checkpoint_start:
        return None
    kept, retired = retire(state, log_start)
    gone = [control.ledger_key(state.commits[key]) for key in retired]
    through = state.end_offset - 1
    payload = _encode(Checkpoint(kept, through, ctl.known_id()).to_json())
    pause_point("checkpoint:before-write")
    offsets: list[int] = []
    try:
        prod.begin_transaction()
        prod.produce(
            topic,
            key=CHECKPOINT_KEY,
            value=payload,
            partition=0,
            on_delivery=lambda error, message: offsets.append(-1 if error else message.offset()),
        )
        prod.commit_transaction(timeout)
        prod.poll(0)  # serve the delivery report if the commit's flush did not
    except Exception as exc:
        if kafka_client.is_fenced(exc):
            return {"fenced": f"checkpoint through {through} not written: a newer checkpointer took over"}
        raise
    return {
        "kept": kept,
        "gone": gone,
        "through": through,
        "bytes": len(payload),
        "watermark_keys": list(state.watermark_keys),
        "offset": offsets[0],  # commit_transaction delivered it
    }


def _readable(ctl: ControlTopic, topic: str, offset: int) -> bool:
    """Wait until readers take the checkpoint at ``offset`` (:func:`_latest`): only then are the
    entries it retired tombstoned, so a publish that returned leaves a state every later read folds
    from that checkpoint, and compaction never removes an entry no readable checkpoint holds."""
    cons = _committed_consumer(ctl)
    try:
        readable = kafka_client.await_committed(cons, topic, offset, kafka_client.request_timeout(None))
    finally:
        cons.close()
    if not readable:
        log.warning("control checkpoint of '%s' at %s not readable in time: no tombstones", ctl.topic, offset)
    return readable


def _encode(data: Mapping[str, Any]) -> bytes:
    return zlib.compress(json.dumps(data, separators=(",", ":")).encode(), 1)


def _decode(value: bytes | None) -> Checkpoint:
    if value is None:
        raise ValueError("checkpoint record has no value")
    return Checkpoint.from_json(json.loads(zlib.decompress(value)), ControlState)
