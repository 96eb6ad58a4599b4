"""The oracle: judges a finished run from the model's ground truth, independently of the code under test.

It never calls ``classify``, ``ReadFilter``, ``decide`` or the changelog folds: it knows which Spark task
runs' records were committed (the snapshots that became ``main``, by compare-and-set, and the task runs
the committing attempt's driver collected), and which input rows each batch carried.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from airflow_logstore.core.control import K_GAP

from .actors import Landed, World
from .model import LogEntry, TaskRun, row_id


@dataclass(frozen=True)
class Violation:
    invariant: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.detail}"


# Invariant names (tests match on them).
BATCH_TWICE = "batch twice in table"
BATCH_MISSING = "batch missing from table"
FENCED_COMMIT = "fenced attempt committed"
TABLE_ROWS = "table rows differ from the committed batches"
CONSISTENT_DUPLICATE = "consistent reader saw a record twice"
CONSISTENT_UNCOMMITTED = "consistent reader saw an uncommitted record"
CONSISTENT_LOST = "consistent reader lost a committed record"
EVENTUAL_FOLD = "eventual read does not fold to the table"
HYBRID = "hybrid read differs from the table"
HYBRID_SPLIT_PAIR = "eventual hybrid read starts inside a reconciler reassert pair"
STUCK = "watermark stuck below the log end at quiescence"
LEDGER_LOST = "control state lost a committed batch"
WATERMARK_BACK = "watermark moved backwards"
FEED_DUPLICATE = "committed feed copied a record twice"
FEED_UNCOMMITTED = "committed feed holds an uncommitted record"
FEED_LOST = "committed feed lost a committed record"
FEED_ORDER = "committed feed out of log order"


def retract_fold(base: Counter[str], entries: Iterable[LogEntry]) -> Counter[str]:
    """Log records folded onto rows under retract semantics: a multiset of rows, counts may go negative."""
    result = Counter(base)
    for entry in entries:
        row, weight = _change(entry.value)
        result[row] += weight
    return result


@lru_cache(maxsize=4096)
def _change(value: bytes) -> tuple[str, int]:
    payload = json.loads(value)
    return row_id(payload["row"]), 1 if payload["kind"] in ("+I", "+U") else -1


def _clean(rows: Counter[str]) -> dict[str, int]:
    return {row: count for row, count in rows.items() if count != 0}


def expected_rows(world: World, landed: Iterable[Landed]) -> Counter[str]:
    """The table after applying the committed batches' input rows in commit order."""
    keyed: dict[object, str] = {}
    appended: Counter[str] = Counter()
    for commit in landed:
        for raw in commit.inputs:
            row = {k: v for k, v in raw.items() if k != "op"}
            if not world.keyed:
                appended[row_id(row)] += 1
            elif raw.get("op") == "D":
                keyed.pop(row["id"], None)
            else:
                keyed[row["id"]] = row_id(row)
    return Counter(keyed.values()) if world.keyed else appended


def check(world: World, watermark: dict[int, int], known: set[tuple[str, int]]) -> list[Violation]:
    """Every invariant, on the finished run (after quiescence).

    :param known: the (writer, batch)s a control read at quiescence says are committed.
    """
    found: list[Violation] = []
    catalog = world.catalog
    main = catalog.snapshots[catalog.refs["main"]]

    # the table: each batch exactly once, fencing, rows
    keys = [(c.writer_id, c.batch_id) for c in world.landed]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        found.append(Violation(BATCH_TWICE, f"(writer, batch) {twice} landed on main more than once"))
    wanted = {(w, b) for w, batches in world.inputs.items() for b in range(1, len(batches) + 1)}
    if wanted - set(keys):
        found.append(Violation(BATCH_MISSING, f"{sorted(wanted - set(keys))} never landed"))
    newest: dict[str, int] = {}
    for commit in world.landed:
        if commit.epoch < newest.get(commit.writer_id, 0):
            found.append(
                Violation(
                    FENCED_COMMIT,
                    f"{commit.writer_id} epoch {commit.epoch} committed batch "
                    f"{commit.batch_id} after epoch {newest[commit.writer_id]} had committed",
                )
            )
        newest[commit.writer_id] = max(newest.get(commit.writer_id, 0), commit.epoch)
        if commit.epoch < commit.in_force:
            found.append(
                Violation(
                    FENCED_COMMIT,
                    f"{commit.writer_id} epoch {commit.epoch} committed batch {commit.batch_id} after "
                    f"epoch {commit.in_force} was in force (had fenced the table)",
                )
            )
    forgotten = sorted({(c.writer_id, c.batch_id) for c in world.landed} - known)
    if forgotten:  # a retried batch would commit again, its records would never be visible
        found.append(Violation(LEDGER_LOST, f"{forgotten} landed, the control state does not know them"))
    if world.control.forgotten:
        found.append(
            Violation(
                LEDGER_LOST, f"a control read forgot {sorted(world.control.forgotten)} an earlier one knew"
            )
        )
    if world.control.regressed:
        found.append(
            Violation(WATERMARK_BACK, f"(partition, read, before): {sorted(world.control.regressed)}")
        )
    table = _clean(main.rows)
    if table != _clean(expected_rows(world, world.landed)):
        found.append(Violation(TABLE_ROWS, f"main {table} != {_clean(expected_rows(world, world.landed))}"))

    # ground truth: the committed records
    runs: set[TaskRun] = set().union(*(c.runs for c in world.landed)) if world.landed else set()
    entries = [e for records in world.log.partitions for e in records]
    committed = {(e.partition, e.offset) for e in entries if e.origin is not None and e.origin in runs}
    ends = world.log.end_offsets()
    if any(watermark.get(p, -1) < end - 1 for p, end in ends.items()):
        found.append(Violation(STUCK, f"watermark {watermark}, log ends {ends}"))

    if world.committed_feed:
        found.extend(_check_feed(world, committed))

    history = {snapshot_id: index for index, snapshot_id in enumerate(catalog.history)}
    # the reconciler said the log lost records it had not reconciled (log-gap/<p>): an eventual log read
    # then needs a hybrid re-read, it need not fold to the table
    gap_reported = any(r.key.startswith(K_GAP) and r.value is not None for r in world.control.records)
    for seen in world.observed:
        positions = [(e.partition, e.offset) for e in seen.records]
        if seen.consistent:
            dupes = sorted({p for p in positions if positions.count(p) > 1})
            if dupes:
                found.append(Violation(CONSISTENT_DUPLICATE, f"{seen.name}: {dupes}"))
            foreign = sorted(set(positions) - committed)
            if foreign:
                found.append(Violation(CONSISTENT_UNCOMMITTED, f"{seen.name}: {foreign}"))
        if seen.file_rows is None:  # a log read or a follower
            lost = committed - seen.gone - set(positions)  # retention's deletions are not the reader's
            if seen.final and seen.consistent and lost and not seen.stopped:
                found.append(Violation(CONSISTENT_LOST, f"{seen.name}: {sorted(lost)}"))
            if seen.final and not seen.gone and not seen.stopped and (seen.consistent or not gap_reported):
                folded = _clean(retract_fold(Counter(), seen.records))
                if folded != table:
                    invariant = TABLE_ROWS if seen.consistent else EVENTUAL_FOLD
                    found.append(Violation(invariant, f"{seen.name}: folds to {folded}, table {table}"))
            continue
        # a hybrid read: the snapshot's rows, then the log
        got = _clean(retract_fold(seen.file_rows, seen.records))
        # what the snapshot lacks: the committed records of the commits that landed after it
        after = history.get(seen.snapshot_id or -1, -1)
        later = {id(r) for c in world.landed if history.get(c.snapshot_id, -1) > after for r in c.runs}
        lacking = [e for e in entries if e.origin is not None and id(e.origin) in later]
        deleted = any(e.offset < seen.low.get(e.partition, 0) for e in lacking)
        if seen.final and not deleted and (seen.consistent or not seen.gone):
            # an eventual read needs every record after the positions (reversals, reassert pairs)
            expected = table
        elif seen.consistent:
            # the snapshot, then each of those records that retention had not deleted when the read
            # started, up to where the read stopped
            records = [
                e for e in lacking if seen.low.get(e.partition, 0) <= e.offset < seen.end.get(e.partition, 0)
            ]
            expected = _clean(retract_fold(seen.file_rows, records))
        else:
            continue
        if got != expected:
            split = not seen.consistent and _splits_reassert_pair(world, seen.start)
            found.append(
                Violation(
                    HYBRID_SPLIT_PAIR if split else HYBRID, f"{seen.name}: got {got}, expected {expected}"
                )
            )
    return found


def _check_feed(world: World, committed: set[tuple[int, int]]) -> list[Violation]:
    """The committed feed at quiescence (the last publish copied up to the log's end): each committed
    record once, nothing else, in log order per partition; records retention deleted before any copy
    took them are the feed's reported gaps, not lost."""
    found = []
    positions = [(e.partition, e.offset) for e in world.feed.records]
    dupes = sorted({p for p in positions if positions.count(p) > 1})
    if dupes:
        found.append(Violation(FEED_DUPLICATE, f"{dupes}"))
    foreign = sorted(set(positions) - committed)
    if foreign:
        found.append(Violation(FEED_UNCOMMITTED, f"{foreign}"))
    lost = sorted(committed - set(positions) - world.feed.gaps)
    if lost:
        found.append(Violation(FEED_LOST, f"{lost}"))
    for partition in {p for p, _ in positions}:
        offsets = [o for p, o in positions if p == partition]
        if offsets != sorted(offsets):
            found.append(Violation(FEED_ORDER, f"partition {partition}: {offsets}"))
    return found


def _splits_reassert_pair(world: World, start: dict[int, int]) -> bool:
    """True when a read from ``start`` gets one half of a reassert pair without the other.

    Reasserts come in pairs ([-U r, +U r] or [+I r, -D r]); per partition, the first halves and the
    second halves from ``start`` on must balance.
    """
    for partition, records in enumerate(world.log.partitions):
        balance = 0
        for entry in records[start.get(partition, 0) :]:
            if entry.origin is None and (b"record-type", b"reassert") in {
                (k.encode(), v) for k, v in entry.headers
            }:
                balance += 1 if json.loads(entry.value)["kind"] in ("-U", "+I") else -1
        if balance:
            return True
    return False
