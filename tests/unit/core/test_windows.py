"""Visible windows: consecutive downstream runs read every offset that became visible exactly once,
whatever a restarting trigger repeated or lost (core/windows.py).

The sweep simulates a watermark that advances, a trigger that fires per advance and restarts at
random moments (losing the events it fired but the triggerer had not stored, and starting again from
the current watermark, from the watermark it had stored, or from what was stored), and Airflow's runs,
each given a consecutive slice of the stored events. The checker counts, per offset, the runs that read
it. It is shown to catch the naive rule (a run reads its own events' ``from`` to ``to``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from airflow_logstore.core.windows import (
    VISIBLE_EVENT,
    Window,
    commits_of,
    is_visible_payload,
    payload_of,
    positions_after,
    run_window,
    visible_payload,
)

PARTITIONS = (0, 1, 2)


def event(start: Mapping[int, int], end: Mapping[int, int], commits: Sequence[str] = ()) -> dict[str, Any]:
    before = {p: o - 1 for p, o in start.items()}
    after = {p: o - 1 for p, o in end.items()}
    return visible_payload("db.t", before, after, start.keys(), commits=commits)


def test_the_payload_carries_positions_after_both_watermarks_for_every_partition() -> None:
    payload = visible_payload("db.t", {0: 4}, {0: 9, 2: 1}, PARTITIONS, commits=["w/1/3"], control_offset=17)
    assert payload["event"] == VISIBLE_EVENT and payload["table"] == "db.t"
    assert payload["from"] == {"0": 5, "1": 0, "2": 0}
    assert payload["to"] == {"0": 10, "1": 0, "2": 2}
    assert payload["watermark"] == {"0": 9, "1": -1, "2": 1}
    assert payload["commits"] == ["w/1/3"] and payload["control_offset"] == 17
    assert positions_after({1: 3}, [0, 1]) == {0: 0, 1: 4}


def test_a_stored_event_is_recognised_in_both_shapes_and_others_are_not() -> None:
    payload = event({0: 0}, {0: 3})
    assert payload_of({"from_trigger": True, "payload": payload}) == payload  # a watcher's event
    assert payload_of(payload) == payload  # an event a task emitted with the payload as its extra
    assert payload_of({"snapshot_id": 7}) is None and payload_of(None) is None
    assert is_visible_payload(payload, "db.t") and not is_visible_payload(payload, "db.other")


def test_a_single_event_is_read_from_its_from_to_its_to() -> None:
    window = run_window([event({0: 5, 1: 0}, {0: 9, 1: 2})], [])
    assert window == Window({0: 5, 1: 0}, {0: 9, 1: 2})
    assert window.size == 6 and not window.empty
    assert window.to_json() == {"from": {"0": 5, "1": 0}, "to": {"0": 9, "1": 2}}


def test_several_events_of_a_run_are_one_window() -> None:
    own = [event({0: 5}, {0: 7}, ["a/1/1"]), event({0: 7}, {0: 9}, ["a/2/1", "a/1/1"])]
    assert run_window(own, [event({0: 0}, {0: 5})]) == Window({0: 5}, {0: 9})
    assert commits_of(own) == ["a/1/1", "a/2/1"]


def test_an_event_a_restart_repeated_is_read_only_past_what_earlier_events_reached() -> None:
    earlier = [event({0: 0}, {0: 5})]
    repeated = event({0: 0}, {0: 8})  # the restarted trigger started from an older watermark
    assert run_window([repeated], earlier) == Window({0: 5}, {0: 8})
    assert run_window([event({0: 0}, {0: 5})], earlier).empty  # nothing new: an empty window


def test_an_event_after_a_lost_one_is_read_from_where_earlier_events_stopped() -> None:
    earlier = [event({0: 0}, {0: 5})]  # the event of 5..6 was lost with the triggerer
    assert run_window([event({0: 7}, {0: 9})], earlier) == Window({0: 5}, {0: 9})


def test_earlier_events_stored_out_of_order_count_by_how_far_they_reached() -> None:
    earlier = [event({0: 5}, {0: 9}), event({0: 0}, {0: 6})]  # any order
    assert run_window([event({0: 9}, {0: 12})], earlier) == Window({0: 9}, {0: 12})
    assert run_window([event({0: 6}, {0: 8})], earlier).empty  # all of it read already


def test_a_run_without_a_visible_event_has_no_window() -> None:
    with pytest.raises(ValueError, match="at least one visible event"):
        run_window([{"event": "logstore.commit"}], [])


# -- the sweep ------------------------------------------------------------------------------------------


def _history(rng: random.Random) -> tuple[list[dict[str, Any]], dict[int, int], int]:
    """Stored visible events of one trigger's life with restarts; the watermark when the downstream DAG
    started scheduling (its first run has no earlier event from before it) and where that is in the list.

    Returns (stored events, the final watermark, index of the first event the DAG gets)."""
    watermark = {p: rng.randrange(-1, 3) for p in PARTITIONS}
    fired = dict(watermark)  # what the running trigger fired up to
    store: dict[int, int] | None = None  # the asset state store (written after each fire)
    stored: list[dict[str, Any]] = []
    unstored: list[dict[str, Any]] = []  # fired, not yet stored by the triggerer
    for _ in range(rng.randrange(4, 30)):
        step = rng.random()
        if step < 0.6:  # the watermark advances (one or more partitions)
            for p in rng.sample(PARTITIONS, rng.randrange(1, len(PARTITIONS) + 1)):
                watermark[p] += rng.randrange(1, 4)
            if rng.random() < 0.8:  # the trigger sees it now (else it sees it with a later advance)
                unstored.append(visible_payload("db.t", fired, watermark, PARTITIONS))
                fired = dict(watermark)
                if rng.random() < 0.9:
                    store = dict(fired)
        elif step < 0.85:  # the triggerer stores what was fired
            stored.extend(unstored)
            unstored = []
        else:  # the triggerer dies: what it had not stored is lost; a new trigger starts
            unstored = []
            choice = rng.random()
            if choice < 0.4 or store is None:
                fired = dict(watermark)  # no state store: the current watermark
            elif choice < 0.7:
                fired = dict(store)  # the store (it may be past what was stored, or behind)
            else:
                to = stored[-1]["to"] if stored else None
                fired = {p: int(to[str(p)]) - 1 for p in PARTITIONS} if to else dict(watermark)
    # the end: one more advance, seen and stored (what no event covers, no run can read yet)
    for p in PARTITIONS:
        watermark[p] += 1
    stored.extend(unstored)
    stored.append(visible_payload("db.t", fired, watermark, PARTITIONS))
    return stored, watermark, rng.randrange(0, len(stored))


def _runs(rng: random.Random, count: int, first: int) -> list[tuple[int, int]]:
    """Consecutive slices ``[i, j)`` of the stored events from ``first`` on, as Airflow's runs get them."""
    cuts = sorted(rng.sample(range(first + 1, count), rng.randrange(0, max(1, min(6, count - first)))))
    bounds = [first, *cuts, count]
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


WindowRule = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]], Window]


def _naive(own: Sequence[Mapping[str, Any]], earlier: Sequence[Mapping[str, Any]]) -> Window:
    """The planted bug: trust the run's own events' ``from``."""
    start = {int(p): min(int(e["from"][p]) for e in own) for p in own[0]["from"]}
    end = {int(p): max(int(e["to"][p]) for e in own) for p in own[0]["to"]}
    return Window(start, end)


def check(seed: int, rule: WindowRule = run_window) -> str | None:
    """None when the runs of ``seed``'s history read each visible offset once, else what went wrong."""
    rng = random.Random(seed)
    stored, watermark, first = _history(rng)
    reads: dict[tuple[int, int], int] = {}
    for a, b in _runs(rng, len(stored), first):
        window = rule(stored[a:b], stored[:a])
        for p, end in window.end.items():
            for offset in range(window.start[p], end):
                reads[(p, offset)] = reads.get((p, offset), 0) + 1
    # from where the DAG came in (what the events before its first run reached, else its first event's
    # from) to the last watermark: each offset once
    begin = run_window(stored[first : first + 1], stored[:first]).start
    for p in PARTITIONS:
        for offset in range(begin[p], watermark[p] + 1):
            count = reads.pop((p, offset), 0)
            if count != 1:
                return f"seed {seed}: offset {p}:{offset} read {count} times"
    if reads:
        return f"seed {seed}: offsets outside the visible range read: {sorted(reads)[:5]}"
    return None


def test_consecutive_runs_read_every_visible_offset_once_over_many_histories() -> None:
    problems = [problem for seed in range(3000) if (problem := check(seed)) is not None]
    assert problems == []


def test_the_checker_catches_the_naive_rule() -> None:
    found = [problem for seed in range(3000) if (problem := check(seed, _naive)) is not None]
    assert found, "the checker let the naive window rule pass"
    assert any("read 2 times" in p for p in found) and any("read 0 times" in p for p in found)
