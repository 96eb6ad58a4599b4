"""The control follower re-bases on the latest checkpoint when compaction removed records it never read.

A scripted compacted control topic (offsets compaction removed are simply absent: a consumer steps over
them, as the broker's fetch does) and a scripted checkpoint, no broker. The story is the one a stalled
follower lives through: it tails from offset 0, stalls; meanwhile batch 1 commits, a publish settles it,
a checkpoint retires its ledger entry, the entry's tombstone follows, a newer epoch of the writer
commits batch 2, and the cleaner removes everything that is not the newest record of its key. Without
the checkpoint the follower would never learn that batch 1 committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from airflow_logstore.core import checkpoint, control
from airflow_logstore.core.codec import RecordMeta
from airflow_logstore.core.control import ControlRecord, ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import Decision, classify
from airflow_logstore.exceptions import KafkaUnavailableError, StreamReadError
from airflow_logstore.read.follow import ControlFollower
from tests.unit.control_messages import ControlMessage

TASK = "0.1"
# the control topic before compaction: (key, value) at offsets 0..
HISTORY: list[tuple[str, dict[str, Any] | None]] = [
    ("epoch/a", {"writer": "a"}),  # 0: epoch 1
    ("commit/a/1", CommitInfo("a", 1, 1, offsets={0: (0, 4)}, tasks=frozenset({TASK})).to_json()),  # 1
    ("watermark", {"offsets": {"0": 4}, "scanned": {"0": [0, 4]}, "holes": {}}),  # 2: settles batch 1
    ("epoch/a", {"writer": "a"}),  # 3: epoch 4
    ("commit/a/2", CommitInfo("a", 2, 4, offsets={0: (5, 9)}, tasks=frozenset({TASK})).to_json()),  # 4
    ("commit/a/1", None),  # 5: batch 1's tombstone, after the checkpoint through 4 retired it
    ("watermark", {"offsets": {"0": 9}, "scanned": {"0": [5, 9]}, "holes": {}}),  # 6
]
THROUGH = 4  # the checkpoint folded offsets 0..4
#: what the cleaner leaves: the newest record of each key (the tombstone too, for a while)
COMPACTED = {3, 4, 5, 6}


class _CompactedTopic:
    """A consumer of a single-partition topic that holds only the offsets ``kept``."""

    def __init__(self, kept: set[int], batch: int = 1000) -> None:
        self.kept, self.batch = kept, batch
        self.position = 0
        self.assigned: list[int] = []
        self.closed = False

    def assign(self, partitions: Sequence[Any]) -> None:
        (tp,) = partitions
        self.position = tp.offset
        self.assigned.append(tp.offset)

    def consume(self, num_messages: int = 1, timeout: float = 0.0) -> list[ControlMessage]:
        out: list[ControlMessage] = []
        for offset in range(self.position, len(HISTORY)):
            if len(out) == min(num_messages, self.batch):
                break
            if offset in self.kept:
                out.append(ControlMessage(offset, *HISTORY[offset]))
            self.position = offset + 1
        return out

    def close(self) -> None:
        self.closed = True


def _fold(offsets: range) -> ControlState:
    records = [ControlRecord(HISTORY[o][0], HISTORY[o][1], o, 1_000 + o) for o in offsets]
    return control.fold(records)


def _checkpoint() -> ControlState:
    """What publish writes: the state through 4 with batch 1's settled entry retired."""
    retired, gone = checkpoint.retire(_fold(range(THROUGH + 1)), {0: 0})
    assert gone == [("a", 1)]
    return retired


class _Checkpoints:
    """The checkpoint topic as the follower reads it, over time: none yet, then the one through 4."""

    def __init__(self) -> None:
        self.latest: tuple[ControlState, int] = (ControlState(), 0)
        self.reads = 0

    def __call__(self) -> tuple[ControlState, int]:
        self.reads += 1
        state, start = self.latest
        return checkpoint.decode_state(checkpoint.encode_state(state, start - 1), ControlState)[0], start


def _batch_one_record() -> tuple[RecordMeta, int, int]:
    return RecordMeta("a", 1, 1, TASK), 0, 2  # batch 1's third record


def _decision(state: ControlState) -> Decision:
    meta, partition, offset = _batch_one_record()
    return classify(meta, partition, offset, state)


def _follower(topic: _CompactedTopic, checkpoints: Any) -> ControlFollower:
    return ControlFollower(topic, "ctl", checkpoints, lambda state: state)


def test_a_follower_that_stalled_past_compaction_re_bases_on_the_checkpoint() -> None:
    checkpoints = _Checkpoints()
    topic = _CompactedTopic(set())  # the follower starts on an empty topic: no checkpoint, offset 0
    follower = _follower(topic, checkpoints)
    assert follower.next == 0 and topic.assigned == [0]
    # it stalls; everything in HISTORY happens, the checkpoint through 4 is written, the cleaner runs
    checkpoints.latest = (_checkpoint(), THROUGH + 1)
    topic.kept = COMPACTED

    assert follower.poll() is True
    assert follower.rebased == 1 and topic.assigned == [0, THROUGH + 1]
    assert follower.poll() is True  # offsets 5, 6: read again from after the checkpoint
    assert follower.next == len(HISTORY) and checkpoints.reads == 2  # one read per poll at most
    state = follower.state
    assert state.committed("a", 1) is not None  # known from the checkpoint: retired, committed
    assert _decision(state) is Decision.COMMITTED  # by the range the publish settled
    assert state.watermark == {0: 9}
    assert state == _fold_checkpoint_and_tail()  # what a fresh reader folds (K1)


def _fold_checkpoint_and_tail() -> ControlState:
    state = _checkpoint()
    return control.fold([ControlRecord(*HISTORY[o], o, 1_000 + o) for o in (5, 6)], state)


def test_without_the_re_base_the_stalled_follower_drops_batch_one_for_good() -> None:
    """What the follower did before: fold what is left. Batch 1's entry and the watermark record that
    settled it are gone, the writer's newest epoch committed batch 2: batch 1 looks redundant."""
    state = _fold(range(0))
    control.fold([ControlRecord(*HISTORY[o], o, 1_000 + o) for o in sorted(COMPACTED)], state)
    assert state.committed("a", 1) is None
    assert _decision(state) is Decision.REDUNDANT  # a consistent follower drops all of batch 1


def test_a_jump_after_the_checkpoint_keeps_the_state_and_reads_once() -> None:
    """Compaction also removes records past the latest checkpoint (older records of a key): nothing
    retired is among them, the state is kept, and the checkpoint is read once for the whole fetch."""
    checkpoints = _Checkpoints()
    checkpoints.latest = (_checkpoint(), THROUGH + 1)
    topic = _CompactedTopic({5, 6})
    follower = _follower(topic, checkpoints)  # starts after the checkpoint: offset 5
    assert (follower.next, checkpoints.reads) == (THROUGH + 1, 1)
    topic.kept = {6}  # 5 compacted away before the follower read it: a jump, the checkpoint is older
    before = follower.state
    follower.poll()
    assert follower.rebased == 0 and follower.state is before and checkpoints.reads == 2
    assert follower.next == len(HISTORY) and follower.state.watermark == {0: 9}


def test_the_watermark_never_moves_backwards_across_a_re_base() -> None:
    checkpoints = _Checkpoints()
    topic = _CompactedTopic(set())
    follower = _follower(topic, checkpoints)
    follower.state.watermark[1] = 50  # e.g. a partition the checkpoint's state has not seen moving
    checkpoints.latest = (_checkpoint(), THROUGH + 1)
    topic.kept = COMPACTED
    follower.poll()
    assert follower.rebased == 1 and follower.state.watermark == {0: 4, 1: 50}


def test_the_live_snapshots_commits_are_merged_into_the_re_based_state() -> None:
    live = CommitInfo("b", 7, 3, offsets={1: (0, 0)}, tasks=frozenset({TASK}))

    def merge(state: ControlState) -> ControlState:
        state.commits.setdefault(live.key, live)
        return state

    checkpoints = _Checkpoints()
    topic = _CompactedTopic(set())
    follower = ControlFollower(topic, "ctl", checkpoints, merge)
    checkpoints.latest = (_checkpoint(), THROUGH + 1)
    topic.kept = COMPACTED
    follower.poll()
    assert follower.rebased == 1 and follower.state.commits[live.key] == live


def test_a_checkpoint_that_fails_to_read_closes_the_consumer() -> None:
    topic = _CompactedTopic(set())

    def broken() -> tuple[ControlState, int]:
        raise RuntimeError("checkpoint unreadable")

    with pytest.raises(RuntimeError, match="unreadable"):
        _follower(topic, broken)
    assert topic.closed


def test_a_re_base_keeps_the_ledger_entries_the_follower_had_read() -> None:
    """Found by the simulation: the checkpoint retired batch 1 because retention deleted its records
    (no publish settled them), while the follower, which had read batch 1's entry, still holds one of
    them in its buffer. The re-based state must keep that entry: from the checkpoint alone the record
    classifies as another attempt's copy (``classify``'s rule for retired batches) and is dropped."""
    by_retention, gone = checkpoint.retire(
        control.fold([ControlRecord(*HISTORY[o], o, 1_000 + o) for o in (0, 1, 3, 4)]), {0: 5}
    )
    assert gone == [("a", 1)] and not by_retention.settled
    checkpoints = _Checkpoints()
    topic = _CompactedTopic({0, 1})
    follower = _follower(topic, checkpoints)
    follower.poll()  # it read batch 1's entry, then stalled
    assert _decision(follower.state) is Decision.COMMITTED
    topic.position = follower.next  # (offsets 2.. were written later)
    checkpoints.latest = (by_retention, THROUGH + 1)
    topic.kept = COMPACTED
    follower.poll()
    assert follower.rebased == 1
    assert _decision(follower.state) is Decision.COMMITTED
    assert _decision(control.fold([], by_retention)) is Decision.REDUNDANT  # the checkpoint alone


def test_a_held_record_no_state_can_decide_any_more_stops_the_follower() -> None:
    """The follower never read batch 1's entry, retention deleted the record it holds, and the
    checkpoint retired the entry by retention: nothing tells whether the record is committed."""
    from airflow_logstore.core.visibility import retired_unknown

    by_retention, _ = checkpoint.retire(
        control.fold([ControlRecord(*HISTORY[o], o, 1_000 + o) for o in (0, 1, 3, 4)]), {0: 5}
    )
    meta, partition, offset = _batch_one_record()
    assert retired_unknown(meta, partition, offset, by_retention, log_start=5)
    assert not retired_unknown(meta, partition, offset, by_retention, log_start=0)  # still in the log
    assert not retired_unknown(meta, partition, offset, _fold(range(THROUGH + 1)), log_start=5)  # known


class _Ids:
    """The control topic's id as Kafka answers it: ``now``, counting the questions."""

    def __init__(self, now: str | None) -> None:
        self.now, self.asked = now, 0
        self.down = False  # Kafka does not answer

    def __call__(self) -> str | None:
        self.asked += 1
        if self.down:
            raise KafkaUnavailableError(
                "Kafka did not describe topic 'ctl': Failed while waiting for controller"
            )
        return self.now


def test_a_control_topic_re_created_under_the_follower_stops_it_naming_the_topic() -> None:
    """The topic is deleted and re-created: the consumer is reset and hands out offsets below ``next``
    (the new topic's first records). Without the check the follower skipped them as folded already, and
    its watermark stood still for good."""
    ids = _Ids("id-1")
    topic = _CompactedTopic(set(range(len(HISTORY))))
    follower = ControlFollower(topic, "ctl", _Checkpoints(), lambda state: state, ids)
    follower.poll()
    assert follower.next == len(HISTORY) and ids.asked == 1  # read at the start only
    topic.position = 0  # the reset: the next records come from offset 0 again ...
    topic.kept = {0, 1}
    follower.poll()  # ... of the same topic (the id did not change): skipped as folded already
    assert ids.asked == 2 and follower.next == len(HISTORY)
    topic.position, ids.now = 0, "id-2"  # a new topic of the same name
    with pytest.raises(StreamReadError, match=r"control topic 'ctl' was deleted and re-created .* id-1"):
        follower.poll()


def test_the_follower_asks_the_topics_id_every_so_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new topic that grew past ``next`` before the consumer noticed shows no lower offset: the id is
    asked anyway every ``TOPIC_CHECK_S`` of polling."""
    from airflow_logstore.read import follow

    ids = _Ids("id-1")
    topic = _CompactedTopic(set())
    follower = ControlFollower(topic, "ctl", _Checkpoints(), lambda state: state, ids)
    follower.poll()
    assert ids.asked == 1
    monkeypatch.setattr(follow, "TOPIC_CHECK_S", 0.0)
    follower.poll()
    assert ids.asked == 2
    ids.now = None  # deleted
    with pytest.raises(StreamReadError, match="its id was id-1, it is None now"):
        follower.poll()


def test_a_periodic_check_that_kafka_cannot_answer_is_asked_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker down (its controller with it) while the id is asked every ``TOPIC_CHECK_S``: the follower
    goes on and asks again (before, the error ended the follow: a cluster test's follower died with its
    broker). A reset of its offsets is still checked at once, and an error there still stops it."""
    from airflow_logstore.read import follow

    ids = _Ids("id-1")
    topic = _CompactedTopic(set(range(len(HISTORY))))
    follower = ControlFollower(topic, "ctl", _Checkpoints(), lambda state: state, ids)
    follower.poll()
    monkeypatch.setattr(follow, "TOPIC_CHECK_S", 0.0)
    ids.down = True
    follower.poll()  # the periodic check fails: logged, not raised
    assert ids.asked == 2 and follower.next == len(HISTORY)
    ids.down = False
    follower.poll()
    assert ids.asked == 3
    ids.down, topic.position, topic.kept = True, 0, {0, 1}  # a reset while Kafka cannot say which topic
    monkeypatch.setattr(follow, "TOPIC_CHECK_S", 3600.0)
    with pytest.raises(KafkaUnavailableError):
        follower.poll()
