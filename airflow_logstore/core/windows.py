"""Visible windows: what a downstream run scheduled on a table's *visible* events reads.

A visible event says that the table's visibility watermark advanced: ``from`` is, per log partition,
the first offset that was not visible before (the previous watermark + 1), ``to`` the first offset
that is not visible after (the new watermark + 1). The records in ``[from, to)`` are all decided
(PROTOCOL V1), so a consistent read of them returns each committed change among them exactly once, and
the same read later returns the same records (a decision never changes).

A downstream run does not trust its own events' ``from`` alone: a trigger that restarts (a triggerer
restart, a trigger moved to another triggerer) cannot know what the events it sent before its death
became, so its first event after the restart may repeat a range an earlier event covered, or start
past one that was lost on its way to the database. The run's window is therefore taken from the
asset's event history, which Airflow stores in order:

- **end**: per partition the furthest ``to`` among the run's own (triggering) events;
- **start**: per partition the furthest ``to`` among the asset's *earlier* events (those stored before
  the run's first triggering event); with no earlier event, the smallest ``from`` of its own events.

Airflow gives each asset-triggered run the events stored in a time slice after the previous run's
(``(previous run, this run]``), so consecutive runs of a DAG read consecutive windows: every offset
any event made visible is read by exactly one run, whatever the trigger repeated or skipped. A cleared
run reads its window again, the same one (its events and the earlier ones do not change).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: ``event`` of a visible event's payload
VISIBLE_EVENT = "logstore.visible"
#: ``event`` of a commit event's payload
COMMIT_EVENT = "logstore.commit"


def positions_after(watermark: Mapping[int, int], partitions: Iterable[int]) -> dict[int, int]:
    """Per partition the first offset above ``watermark`` (-1, none visible: 0)."""
    return {p: int(watermark.get(p, -1)) + 1 for p in sorted(partitions)}


def _positions(value: Any, what: str) -> dict[int, int]:
    if not isinstance(value, Mapping):
        raise ValueError(f"a visible event's '{what}' must map partitions to offsets, not {value!r}")
    return {int(p): int(o) for p, o in value.items()}


def visible_payload(
    table: str,
    before: Mapping[int, int],
    after: Mapping[int, int],
    partitions: Iterable[int],
    *,
    commits: Sequence[str] = (),
    control_offset: int | None = None,
    observed_at_ms: int | None = None,
    control_topic_id: str | None = None,
) -> dict[str, Any]:
    """The payload of the event that the watermark of ``table`` moved from ``before`` to ``after``
    (watermarks: per partition the highest visible offset, -1 for none), as plain JSON.

    :param commits: the commits ("writer/batch/epoch") whose records became visible with the move
    :param control_offset: the control topic's offset through which the watcher had read
    :param control_topic_id: the id Kafka gave the control topic: a table dropped and created again under
        its name has another, and offsets that start again (:func:`run_window`)
    """
    parts = sorted(set(partitions) | set(before) | set(after))
    payload = {
        "event": VISIBLE_EVENT,
        "table": table,
        "from": {str(p): o for p, o in positions_after(before, parts).items()},
        "to": {str(p): o for p, o in positions_after(after, parts).items()},
        "watermark": {str(p): int(after.get(p, -1)) for p in parts},
        "commits": list(commits),
        "control_offset": control_offset,
        "observed_at_ms": observed_at_ms,
    }
    if control_topic_id is not None:
        payload["control_topic_id"] = control_topic_id
    return payload


def catch_up_payload(table: str, later: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The payload of the event that brings a run for ``later`` visible payloads of ``table`` (newest
    first) that Airflow gave no run (``LogStoreVisibleCatchUpOperator``): an empty range at the furthest
    ``to`` they reached, so the run's window ends there (their own ranges are its events too, or an
    earlier run's). Only the newest one's control topic counts (a table created again starts its
    offsets again)."""
    visible = [payload for payload in later if is_visible_payload(payload, table)]
    topic = next((p["control_topic_id"] for p in visible if p.get("control_topic_id") is not None), None)
    reached: dict[int, int] = {}
    for payload in visible:
        if payload.get("control_topic_id") in (None, topic):
            for p, o in _positions(payload.get("to"), "to").items():
                reached[p] = max(reached.get(p, o), o)
    watermark = {p: o - 1 for p, o in reached.items()}
    return {**visible_payload(table, watermark, watermark, reached, control_topic_id=topic), "catch_up": True}


def payload_of(extra: Any) -> Mapping[str, Any] | None:
    """The LogStore payload of a stored asset event's ``extra``: a watcher's event is stored as
    ``{"from_trigger": true, "payload": <the trigger's payload>}``, an event a task emitted with the
    payload as its extra; None for any other event."""
    if not isinstance(extra, Mapping):
        return None
    inner = extra.get("payload")
    if isinstance(inner, Mapping) and "event" in inner:
        return inner
    return extra if "event" in extra else None


def is_visible_payload(payload: Any, table: str | None = None) -> bool:
    """Whether ``payload`` is a visible event's (of ``table`` when given)."""
    return (
        isinstance(payload, Mapping)
        and payload.get("event") == VISIBLE_EVENT
        and (table is None or payload.get("table") == table)
    )


@dataclass(frozen=True)
class Window:
    """Per partition the offsets ``[start, end)`` a run reads."""

    start: dict[int, int] = field(default_factory=dict)
    end: dict[int, int] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """How many offsets the window spans (records of every kind, not only the visible changes)."""
        return sum(max(0, self.end[p] - self.start.get(p, self.end[p])) for p in self.end)

    @property
    def empty(self) -> bool:
        return self.size == 0

    def to_json(self) -> dict[str, dict[str, int]]:
        return {
            "from": {str(p): o for p, o in sorted(self.start.items())},
            "to": {str(p): o for p, o in sorted(self.end.items())},
        }


def run_window(own: Sequence[Mapping[str, Any]], earlier: Iterable[Mapping[str, Any]]) -> Window:
    """The window of a run whose triggering events are ``own`` (visible payloads of one table, oldest
    first), given the payloads of that asset's events stored before them (``earlier``; any order; others
    ignored).

    :raises ValueError: ``own`` holds no visible payload.
    """
    mine = [payload for payload in own if is_visible_payload(payload)]
    if not mine:
        raise ValueError("a run's window needs at least one visible event of its own")
    # own events of two lives of the table (dropped and created again between them): the newest life's
    # only (``own`` oldest first); the earlier life's log is gone with its topic
    newest = next((p["control_topic_id"] for p in reversed(mine) if p.get("control_topic_id")), None)
    if newest is not None:
        mine = [payload for payload in mine if payload.get("control_topic_id") in (None, newest)]
    end: dict[int, int] = {}
    first: dict[int, int] = {}
    for payload in mine:
        for p, o in _positions(payload.get("to"), "to").items():
            end[p] = max(end.get(p, o), o)
        for p, o in _positions(payload.get("from"), "from").items():
            first[p] = min(first.get(p, o), o)
    reached: dict[int, int] = {}
    for payload in earlier:
        if not is_visible_payload(payload):
            continue
        if newest is not None and payload.get("control_topic_id") not in (None, newest):
            continue  # the table's earlier life (dropped, created again): its offsets are another log's
        for p, o in _positions(payload.get("to"), "to").items():
            reached[p] = max(reached.get(p, o), o)
    start = {}
    for p, last in end.items():
        begin = reached.get(p, first.get(p, last))
        start[p] = min(begin, last)
    return Window(start, end)


def commits_of(payloads: Iterable[Mapping[str, Any]]) -> list[str]:
    """The commits the visible payloads name, in order, each once."""
    seen: dict[str, None] = {}
    for payload in payloads:
        if is_visible_payload(payload):
            for name in payload.get("commits") or []:
                seen.setdefault(str(name), None)
    return list(seen)
