"""A table's control topic: writer epochs, ledger entries, the visibility watermark, leases.

One partition, compacted, stamped by the broker (``LogAppendTime``). Its state is read as "the latest
checkpoint + the records after it" (:mod:`airflow_logstore.log.checkpoints`); every append goes through
the one produce loop of :mod:`airflow_logstore.log.kafka_client`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from airflow_logstore.core import control
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.exceptions import ControlTopicChangedError, TopicError
from airflow_logstore.log import checkpoints, kafka_client

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
        :mod:`airflow_logstore.log.checkpoints`) with every record after it folded on."""
        return checkpoints.read_state(self)

    def append(self, key: str, value: Mapping[str, Any] | None) -> int:
        """Write one record durably and return its offset."""
        tracker = kafka_client.DeliveryTracker()
        with kafka_client.shared_producer(self.config, **{"linger.ms": 0}) as prod:
            prod.produce(
                self.topic, key=key.encode(), value=control.encode(value), partition=0, on_delivery=tracker
            )
            kafka_client.flush(prod, tracker, 1, f"control topic '{self.topic}'", timeout=60.0)
        return tracker.offsets[0][0]

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
            control.epoch_key(writer_id),
            {"writer": writer_id, "owner": owner, "claimed_at_ms": kafka_client.now_ms()},
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
