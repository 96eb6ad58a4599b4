"""A follower's resume position: per partition the first offset it has not handed out.

The arithmetic on scripted records and states (no broker): a record still held never lets the position
pass it, a filtered record does; the position's JSON form and its checks against the log. Then the
property it exists for, over random histories: a consistent follower stopped after any record and
resumed from that record's position yields every committed record exactly once across both runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from airflow_logstore.core.changelog import Normalizer
from airflow_logstore.core.codec import RecordMeta, RowKind, decode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import Decision, ReadFilter, classify
from airflow_logstore.exceptions import OptionError
from airflow_logstore.read import follow
from airflow_logstore.read.reader import LogReader, StartPosition, filter_for
from tests.unit.read.test_follow_snapshot import TASK, ZOMBIE_TASK, _reader, _Record, _report

# -- the position's JSON form ------------------------------------------------------------------------


def test_a_positions_start_parses_from_text_and_from_its_token() -> None:
    start = StartPosition.parse('positions:{"0":12,"1":7}')
    assert start == StartPosition("positions", None, ((0, 12), (1, 7)))
    assert start.resume_token() == {"positions": {"0": 12, "1": 7}}
    assert StartPosition.of(start.resume_token()) == start  # JSON keys are strings: taken as partitions
    assert StartPosition.parse('positions:{"positions":{"1":7,"0":12}}') == start
    assert StartPosition.of({"1": 4}) == {1: 4}  # a plain mapping stays a mapping (clamped to the log)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("positions:[1]", "not a JSON object"),
        ("positions:{", "is not JSON"),
        ('positions:{"0":-1}', "offset -1"),
        ('positions:{"x":1}', "partition 'x'"),
        ('positions:{"0":1.5}', "offset 1.5"),
        ('positions:{"0":true}', "offset True"),
        ('positions:{"positions":{"0":1},"snapshot":{"sequence":1}}', "snapshot of a positions start"),
    ],
)
def test_a_malformed_positions_start_names_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        StartPosition.parse(text)


def _log_reader() -> LogReader:
    reader = LogReader.__new__(LogReader)
    reader.topic = "log"
    return reader


BOUNDS = {0: (5, 20), 1: (0, 3)}


def test_a_resume_position_starts_exactly_there() -> None:
    start = StartPosition.at({0: 7, 1: 3})
    assert _log_reader().start_offsets(start, None, BOUNDS) == {0: 7, 1: 3}


@pytest.mark.parametrize(
    ("offsets", "message"),
    [
        ({0: 4, 1: 0}, r"resume position 4 of partition 0 of 'log' is below its log start 5: retention "),
        ({0: 21, 1: 0}, r"resume position 21 of partition 0 of 'log' is past its end 20: .*recreated"),
        ({0: 5}, r"no offset for partition 1"),
    ],
)
def test_a_resume_position_the_log_cannot_honour_is_refused(offsets: dict[int, int], message: str) -> None:
    """Never a silent skip (retention deleted what the follower had not returned) or re-read."""
    with pytest.raises(OptionError, match=message):
        _log_reader().start_offsets(StartPosition.at(offsets), None, BOUNDS)


# -- the arithmetic ------------------------------------------------------------------------------------


def _commit(batch: int, spans: dict[int, tuple[int, int]]) -> CommitInfo:
    return CommitInfo("w", batch, 1, offsets=spans, tasks=frozenset({TASK}))


def test_the_position_never_passes_a_held_record_and_passes_filtered_ones() -> None:
    # partition 0: batch 1 (0), a zombie copy (1, redundant), batch 2 (2, in flight: held);
    # partition 1: batch 1 (0)
    pending: dict[int, list[Any]] = {
        0: [
            _Record(0, 0, RecordMeta("w", 1, 1, TASK)),
            _Record(0, 1, RecordMeta("w", 1, 1, ZOMBIE_TASK)),
            _Record(0, 2, RecordMeta("w", 1, 2, TASK)),
        ],
        1: [_Record(1, 0, RecordMeta("w", 1, 1, TASK))],
    }
    state = ControlState(
        epochs={"w": 1}, commits={("w", 1): _commit(1, {0: (0, 0), 1: (0, 0)})}, watermark={0: 2, 1: 0}
    )
    position = follow.ResumePosition({0: 0, 1: 0}, None)
    rule = filter_for(state, True, None, {})
    out = list(follow._release(_reader(), state, rule, pending, _report(), position))
    assert [(r.partition, r.offset) for r in out] == [(0, 0), (1, 0)]
    # after (0, 0): partition 1's record is not handed out yet
    assert out[0].resume_position == {"positions": {"0": 1, "1": 0}}
    # after (1, 0): partition 0 passed the redundant copy (filtered), stops at batch 2 (held)
    assert out[1].resume_position == {"positions": {"0": 2, "1": 1}}
    assert position.offsets == {0: 2, 1: 1} and [m.offset() for m in pending[0]] == [2]


def test_a_record_yielded_as_two_changes_is_handed_out_with_the_second() -> None:
    """An eventual normalizing follower: an update of a key comes out as -U then +U."""
    reader = _reader()
    normalizer = Normalizer()
    position = follow.ResumePosition({0: 0}, None)
    eventual = ReadFilter(None, consistent=False)
    first = _Record(0, 0, RecordMeta("w", 1, 1, TASK))
    again = _Record(0, 1, RecordMeta("w", 1, 2, TASK), RowKind.UPDATE_AFTER)
    again.key = first.key  # type: ignore[method-assign]  # the same key, another row
    out = [
        r
        for message in (first, again)
        for r in follow._hand_out(reader, message, eventual, _report(), normalizer, position)
    ]
    assert [(r.kind, r.offset) for r in out] == [
        (RowKind.INSERT, 0),
        (RowKind.UPDATE_BEFORE, 1),
        (RowKind.UPDATE_AFTER, 1),
    ]
    assert [r.resume_position for r in out] == [
        {"positions": {"0": 1}},
        {"positions": {"0": 1}},  # stopped here, the follower yields both halves again
        {"positions": {"0": 2}},
    ]


# -- stop anywhere, resume: exactly once -----------------------------------------------------------------


@dataclass
class _History:
    """A random log of one writer's batches in two partitions, and the control state over time."""

    records: list[_Record] = field(default_factory=list)
    arrive: list[int] = field(default_factory=list)  # the step each record reaches the log
    states: list[ControlState] = field(default_factory=list)  # the follower's state at each step


def _history(rng: random.Random, batches: int = 8) -> _History:
    history = _History()
    ends = {0: 0, 1: 0}
    commits: list[tuple[int, CommitInfo]] = []  # (the step the commit is known from, the commit)
    step = 0
    for batch in range(1, batches + 1):
        spans: dict[int, tuple[int, int]] = {}
        for partition in rng.sample([0, 1], rng.randint(1, 2)):
            count = rng.randint(1, 3)
            task = TASK if rng.random() < 0.8 else ZOMBIE_TASK  # a zombie copy in this partition
            for _ in range(count):
                history.records.append(_Record(partition, ends[partition], RecordMeta("w", 1, batch, task)))
                history.arrive.append(step)
                ends[partition] += 1
            if task == TASK:
                spans[partition] = (ends[partition] - count, ends[partition] - 1)
        step += rng.randint(0, 2)
        if spans:
            commits.append((step + rng.randint(0, 3), _commit(batch, spans)))
        else:  # only zombie copies: the batch commits elsewhere (another epoch's records, not here)
            commits.append((step, CommitInfo("w", batch, 2, offsets={}, tasks=frozenset({TASK}))))
    last = max(step, *(known for known, _ in commits)) + 2
    for now in range(last + 1):
        known = {c.key: c for at, c in commits if at <= now}
        # the watermark: each partition passes a random prefix of what has arrived by now, and at the
        # end the whole log (it may pass records the state does not decide yet: they are held)
        watermark = {}
        for partition in (0, 1):
            arrived = zip(history.records, history.arrive, strict=True)
            top = max(
                (r.offset() for r, at in arrived if at <= now and r.partition() == partition), default=-1
            )
            previous = history.states[-1].watermark.get(partition, -1) if history.states else -1
            watermark[partition] = top if now == last else max(previous, rng.randint(previous, top))
        history.states.append(ControlState(epochs={"w": 1}, commits=known, watermark=watermark))
    return history


def _run(
    history: _History, start: dict[int, int], first_step: int, stop_after: int | None
) -> tuple[list[tuple[int, int]], dict[str, Any] | None, int]:
    """A consistent follower from ``start`` at ``first_step``: (what it yielded, the resume position of
    the last record, the step it stopped at) once it yielded ``stop_after`` records (None: to the end)."""
    pending: dict[int, list[Any]] = {0: [], 1: []}
    position = follow.ResumePosition(start, None)
    seen: list[tuple[int, int]] = []
    token = None
    for now in range(first_step, len(history.states)):
        for record, at in zip(history.records, history.arrive, strict=True):
            # the consumer delivers, in offset order, what reached the log since the last round
            arrived_now = at == now or (now == first_step and at < now)
            if arrived_now and record.offset() >= start[record.partition()]:
                pending[record.partition()].append(record)
        state = history.states[now]
        rule = filter_for(state, True, None, start)
        for out in follow._release(_reader(), state, rule, pending, _report(), position):
            seen.append((out.partition, out.offset))
            token = out.resume_position
            if stop_after is not None and len(seen) >= stop_after:
                return seen, token, now
    return seen, token, len(history.states) - 1


def _committed(history: _History) -> list[tuple[int, int]]:
    final = history.states[-1]
    return [
        (r.partition(), r.offset())
        for r in history.records
        if classify(decode_headers(r.headers()), r.partition(), r.offset(), final) is Decision.COMMITTED
    ]


def test_a_consistent_follower_resumed_from_any_record_yields_each_committed_record_once() -> None:
    checked = 0
    for seed in range(150):
        rng = random.Random(seed)
        history = _history(rng)
        everything, _, _ = _run(history, {0: 0, 1: 0}, 0, None)
        assert sorted(everything) == sorted(_committed(history)), seed
        for stop_after in range(1, len(everything)):
            first, token, stopped = _run(history, {0: 0, 1: 0}, 0, stop_after)
            assert token is not None
            resumed = StartPosition.of(token)
            assert isinstance(resumed, StartPosition)
            rest, _, _ = _run(history, dict(resumed.offsets), stopped, None)
            assert first + rest == everything, (seed, stop_after)  # once each, in the same order
            checked += 1
    assert checked > 500


def test_restarting_with_latest_loses_the_committed_records_held_above_the_watermark() -> None:
    """Why the position exists: a follower stopped while batch 2 (committed) waits for the watermark,
    restarted at the log's end, never yields batch 2."""
    history = _History(
        records=[_Record(0, 0, RecordMeta("w", 1, 1, TASK)), _Record(0, 1, RecordMeta("w", 1, 2, TASK))],
        arrive=[0, 0],
    )
    commits = {("w", 1): _commit(1, {0: (0, 0)}), ("w", 2): _commit(2, {0: (1, 1)})}
    state = ControlState(epochs={"w": 1}, commits=commits, watermark={0: 0})
    history.states = [state, replace(state, watermark={0: 1})]
    first, token, stopped = _run(history, {0: 0}, 0, 1)
    assert first == [(0, 0)] and token == {"positions": {"0": 1}} and stopped == 0
    latest, _, _ = _run(history, {0: 2}, 1, None)  # `latest`: the log's end when it restarts
    assert latest == []  # batch 2 lost
    resumed, _, _ = _run(history, {0: 1}, 1, None)
    assert resumed == [(0, 1)]
