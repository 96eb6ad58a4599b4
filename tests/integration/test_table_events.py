"""The commit and visible triggers on the real broker, Spark and Iceberg, run by Airflow's trigger runner.

Batches are written by the real dual write (``DualWriter``), published by the real publisher; the
triggers go into Airflow's ``TriggerRunner`` serialized, as the triggerer runs them, and the visible
trigger is stopped and started again from its serialized form in the middle (a triggerer restart).
The downstream side is the window rule of ``core/windows.py`` over the events in the order they were
stored, and the read ``LogStoreReadVisibleOperator`` makes. What it shows: every committed change is
read once across the runs, nothing of an attempt that never committed is read, and the commit trigger
fires once per commit (and, when it starts, for a commit not visible yet).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from airflow_logstore.core.codec import RecordMeta, encode_headers
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.windows import COMMIT_EVENT, run_window
from airflow_logstore.log import kafka_client
from airflow_logstore.pause import on_pause
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read.reader import StartPosition, read_log, run_read
from airflow_logstore.table.tables import LogStoreTable
from airflow_logstore.triggers.assets import logstore_commit_asset, logstore_visible_asset
from airflow_logstore.write.writer import open_writer
from logstore_dev.testing.tables import make_table, write_jsonl
from tests.triggerer_loop import TriggererLoop


def _rows(batch: int) -> list[dict[str, Any]]:
    return [{"id": batch * 10 + n, "name": f"b{batch}", "amount": n} for n in range(4)]


def _produce(handle: LogStoreTable, meta: RecordMeta, count: int) -> list[int]:
    """``count`` records of ``meta``'s writer, epoch and batch, in partition 0; their offsets."""
    config = handle.config()
    tracker = kafka_client.DeliveryTracker()
    prod = kafka_client.producer(handle.kafka_config(config))
    for n in range(count):
        value = b'{"kind":"+I","row":{"id":%d,"name":"z","amount":1}}' % (900 + n)
        prod.produce(
            config.topic, value=value, headers=encode_headers(meta), partition=0, on_delivery=tracker
        )
    kafka_client.flush(prod, tracker, count, "test records")
    first, last = tracker.offsets[0]
    return list(range(first, last + 1))


def _dead_attempt(handle: LogStoreTable, batch: int) -> list[tuple[int, int]]:
    """Writer ``z``'s batch: its first epoch produces records and dies before committing; a newer epoch
    commits the batch with records of its own, so the first one's records are redundant. Returns the
    dead records' (partition, offset)."""
    ctl = handle.control()
    dead = _produce(handle, RecordMeta("z", ctl.claim_epoch("z"), batch, "0.1"), 2)
    epoch = ctl.claim_epoch("z")
    live = _produce(handle, RecordMeta("z", epoch, batch, "0.2"), 2)
    commit = CommitInfo("z", batch, epoch, offsets={0: (live[0], live[-1])}, tasks=frozenset({"0.2"}))
    ctl.record_commit(commit.to_json(), "z", batch)
    return [(0, offset) for offset in dead]


def _read_window(handle: LogStoreTable, window: Any) -> list[tuple[int, int]]:
    """The (partition, offset) of each change a run reads in ``window`` (the read operator's read)."""
    out: list[str] = []

    class Sink:
        def write(self, text: str) -> None:
            out.extend(line for line in text.splitlines() if line)

    run_read(
        handle,
        mode="log",
        consistency="consistent",
        start=StartPosition.at(window.start),
        end=window.end,
        output=Sink(),
    )
    return [(int(r["_partition"]), int(r["_offset"])) for r in map(json.loads, out)]


def test_visible_events_give_each_committed_change_to_one_run_across_a_triggerer_restart(
    env, spark, tmp_path: Path
) -> None:
    handle = make_table(env)
    name = str(handle.name)
    writer = open_writer(spark, name, writer_id="events")

    def write(batch: int) -> None:
        writer.write_path(str(write_jsonl(tmp_path / f"b{batch}.jsonl", _rows(batch))), batch)

    commit_trigger = logstore_commit_asset(name, poll_interval=0.2).watchers[0].trigger
    visible_trigger = logstore_visible_asset(name, poll_interval=0.2).watchers[0].trigger
    loop = TriggererLoop()
    stored: list[dict[str, Any]] = []  # the visible events in the order the triggerer stored them
    watching = threading.Event()  # the visible trigger took the watermark it starts from

    async def scenario() -> list[Any]:
        commits_id = await loop.start(commit_trigger)
        visible_id = await loop.start(visible_trigger)
        await loop.reached(watching)
        assert await loop.settle(visible_id) == []  # an empty table: nothing visible, no event
        await asyncio.to_thread(write, 1)
        assert (await loop.wait_for_events(commits_id, 1))[0].payload["commits"][0]["batch_id"] == 1
        await asyncio.to_thread(publish_visible_offsets, handle)  # what logstore_publish's run does
        stored.extend(e.payload for e in await loop.wait_for_events(visible_id, 1))

        await loop.stop(visible_id)  # the triggerer restarts; meanwhile batch 2 and a dead attempt
        await asyncio.to_thread(write, 2)
        dead.extend(await asyncio.to_thread(_dead_attempt, handle, 7))
        await asyncio.to_thread(publish_visible_offsets, handle)
        visible_id = await loop.start(visible_trigger)  # from its serialized form again
        await loop.reached(watching)
        assert await loop.settle(visible_id) == []  # no state store here: it starts from now
        await asyncio.to_thread(write, 3)
        await asyncio.to_thread(publish_visible_offsets, handle)
        stored.extend(e.payload for e in await loop.wait_for_events(visible_id, 1))
        commits = await loop.wait_for_events(commits_id, 3)
        await loop.close()
        return commits

    dead: list[tuple[int, int]] = []
    with on_pause("events:watching", watching.set):
        commit_events = asyncio.run(scenario())

    assert [c["batch_id"] for e in commit_events for c in e.payload["commits"]] == [1, 2, 3]
    assert all(e.payload["event"] == COMMIT_EVENT for e in commit_events)
    # two runs: the first gets the first event, the second the one after the restart
    windows = [run_window(stored[:1], []), run_window(stored[1:], stored[:1])]
    assert stored[1]["from"] != stored[0]["to"]  # the restarted trigger did not see batch 2's advance
    assert windows[1].start == windows[0].end  # ... and the second run starts where the first stopped
    reads = [_read_window(handle, window) for window in windows]
    everything = read_log(handle, consistency="consistent")
    committed = sorted((r.partition, r.offset) for r in everything.records)
    assert Counter(p for run in reads for p in run) == Counter(committed)  # each change once, none lost
    assert not set(dead) & {p for run in reads for p in run}  # the dead attempt's records never
    assert all(windows[1].start[p] <= o < windows[1].end[p] for p, o in dead)  # ... though in the window
    batches = [
        sorted({r.meta.batch_id for r in everything.records if (r.partition, r.offset) in set(run)})
        for run in reads
    ]
    assert batches == [[1], [2, 3, 7]]


def test_a_commit_trigger_started_after_a_commit_that_is_not_visible_fires_for_it(
    env, spark, tmp_path: Path
) -> None:
    handle = make_table(env)
    name = str(handle.name)
    writer = open_writer(spark, name, writer_id="late")
    writer.write_path(str(write_jsonl(tmp_path / "b1.jsonl", _rows(1))), 1)
    publish_visible_offsets(handle)
    writer.write_path(str(write_jsonl(tmp_path / "b2.jsonl", _rows(2))), 2)  # not published
    loop = TriggererLoop()

    async def scenario() -> list[Any]:
        trigger_id = await loop.start(logstore_commit_asset(name, poll_interval=0.2).watchers[0].trigger)
        events = await loop.wait_for_events(trigger_id, 1)
        events = await loop.settle(trigger_id, polls=10) or events  # and nothing more
        await loop.close()
        return events

    events = asyncio.run(scenario())
    assert len(events) == 1 and events[0].payload["unpublished"] is True
    assert [(c["writer_id"], c["batch_id"]) for c in events[0].payload["commits"]] == [("late", 2)]


def test_triggers_on_a_table_that_does_not_exist_yet_fire_nothing_retry_and_fire_its_first_changes(
    env, spark, tmp_path: Path
) -> None:
    """An error in a trigger yields no event: both triggers are started before their table exists, fail
    their polls (logged, retried after a backoff) and fire nothing; once the table is created, written
    and published, each fires for exactly its first change."""
    name = env.unique("later")
    commit_trigger = logstore_commit_asset(f"it.{name}", poll_interval=0.2).watchers[0].trigger
    visible_trigger = logstore_visible_asset(f"it.{name}", poll_interval=0.2).watchers[0].trigger
    loop = TriggererLoop()
    failures = Counter[str]()
    enough = threading.Event()

    def failed() -> None:
        failures["polls"] += 1
        if failures["polls"] >= 4:  # both triggers failed, and were retried
            enough.set()

    async def scenario() -> tuple[list[Any], list[Any]]:
        commits_id = await loop.start(commit_trigger)
        visible_id = await loop.start(visible_trigger)
        await loop.reached(enough)
        assert await loop.settle(commits_id) == [] and await loop.settle(visible_id) == []
        handle = await asyncio.to_thread(make_table, env, name=name)
        await loop.reached(watching)  # its retry found the table: it fires for what moves from now
        writer = await asyncio.to_thread(open_writer, spark, f"it.{name}", writer_id="later")
        path = str(write_jsonl(tmp_path / "b1.jsonl", _rows(1)))
        await asyncio.to_thread(writer.write_path, path, 1)
        commits = await loop.wait_for_events(commits_id, 1)
        await asyncio.to_thread(publish_visible_offsets, handle)
        visible = await loop.wait_for_events(visible_id, 1)
        await loop.close()
        return commits, visible

    watching = threading.Event()  # the visible trigger took the watermark it starts from
    with on_pause("events:poll-failed", failed), on_pause("events:watching", watching.set):
        commits, visible = asyncio.run(scenario())

    handle = LogStoreTable.open(f"it.{name}")
    assert [c["batch_id"] for e in commits for c in e.payload["commits"]] == [1]
    assert len(visible) == 1
    window = run_window([visible[0].payload], [])
    read = _read_window(handle, window)
    committed = sorted((r.partition, r.offset) for r in read_log(handle, consistency="consistent").records)
    assert sorted(read) == committed and committed  # batch 1, all of it, from the table's start
