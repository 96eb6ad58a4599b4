"""The protocol's actors as step machines over the in-memory model.

Each actor is a generator that yields a label before every step that touches shared state (a log or
control-topic append or read, a catalog load or compare-and-set), so the scheduler can interleave, pause
or kill it there. Every *decision* is the project's real core code (``classify``, ``WatermarkScan``,
``decide_on``, ``commit_positions``, ``included_commits``, ``ReadFilter``, ``control.fold``, ``retire``,
``encode_state`` / ``decode_state``, ``plan_batch``, the reconcile
planner, ``plan_expiry``, ``scan_watermark`` / ``watermark_scan_range``, ``missing_commits`` /
``with_commits``); the actors only mirror the order of the I/O of the real modules, and each step names
the function it mirrors.

``Bugs`` restores the old behaviour of holes 1-4 of issue 13, and plants bugs in settled ranges,
retirement, ``logstore.log-included`` and the follower's hold rule (test-only switches: core/ has none).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from airflow_logstore.compaction.policy import RetentionPolicy, SnapshotInfo, plan_expiry, unrecorded_commits
from airflow_logstore.core import control, ranges
from airflow_logstore.core import reconcile as rec
from airflow_logstore.core.batch_plan import apply_final, plan_batch
from airflow_logstore.core.checkpoint import encode_state, retirable, retire
from airflow_logstore.core.codec import (
    H_PAIR,
    RecordMeta,
    RecordType,
    decode_headers,
    encode_headers,
    encode_key,
    encode_value,
    partition_for_key,
)
from airflow_logstore.core.commit import Verdict, attempt_refs, decide_on, stale_attempt_refs
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.feed import FeedCopy, copy_range
from airflow_logstore.core.ledger import missing_commits, with_commits
from airflow_logstore.core.summary import (
    OP_BASE,
    OP_COMPACTION,
    S_OPERATION,
    S_POSITIONS,
    CommitInfo,
    advance_positions,
    positions_from_json,
)
from airflow_logstore.core.visibility import (
    Decision,
    FirstCopies,
    ReadFilter,
    classify,
    included_commits,
    recorded_positions,
    retired_unknown,
    scan_watermark,
    watermark_scan_range,
    with_positions,
)
from airflow_logstore.reconcile import reconciler as reconciler_steps
from airflow_logstore.write.writer import task_identity

from .model import (
    Catalog,
    CommittedFeed,
    ControlTopic,
    KafkaLog,
    LogEntry,
    Row,
    Snapshot,
    TableView,
    TaskRun,
    row_id,
)

Steps = Generator[str, None, None]
COMMIT_ATTEMPTS = 6  # write.writer.COMMIT_ATTEMPTS
SPARK_TASKS = 2


@dataclass(frozen=True)
class Bugs:
    """Test-only switches restoring the old (wrong) behaviour of issue 13's holes."""

    decide_once: bool = False  # 1: decide once before the MERGE, then commit without compare-and-set
    attempt_number_tags: bool = False  # 2: task tag "<partition>.<attempt number>"
    state_before_ends: bool = False  # 3: publish reads the control state before the log end offsets
    advance_positions: bool = False  # 4: positions = max(last + 1) of the batch's offsets
    split_pairs: bool = False  # found by the simulation: the watermark ignores reassert pairs
    retire_unsettled: bool = False  # checkpoints retire every ledger entry, settled or not
    no_holes: bool = False  # watermark records settle their range without its redundant/foreign runs
    no_included: bool = False  # hybrid reads ignore logstore.log-included (ask the ledger by sequence)
    follower_drops_undecided: bool = False  # 3 (follow.py): release undecided records below the watermark
    ignore_fence: bool = False  # 1 (strict): a publish does not require its fence tag (a claim that lands
    # after the attempt's decision does not stop its commit)
    # found by the simulation, fixed (README, Findings): the publish consumer reset to the log start without
    # an error (auto.offset.reset=earliest), so records deleted between the bounds and the scan were
    # skipped, and scan_watermark's settled range still covered them as committed data
    publish_skips_deleted: bool = False
    # issue 18: the reconciler's position moves past records in flight; its progress record must keep
    # their attempts (pending) so that the run after their batch commits elsewhere reverses them
    forget_pending: bool = False
    # issue 33, holes 1 and 2: readers count every copy of a reconciler record (a reconcile task retried
    # after a partial flush resends its records; two reconcilers plan and write the same window)
    readers_count_copies: bool = False
    # issue 33, hole 3: a checkpoint is written without the checkpointers' transactional id (no fencing
    # token) from the state the publish read before (no read after the token, no forward-only check)
    stale_checkpoint: bool = False
    # issue 33, hole 3 (followers): a consistent follower that missed compacted records keeps tailing
    # without re-reading the latest checkpoint
    follower_ignores_compaction: bool = False
    # issue 33, hole 4: a commit whose state is unknown (the catalog answered 5xx) counts as committed
    unknown_as_success: bool = False
    # found by this simulation (README, Findings): every watermark record under one key; compaction keeps
    # the last, which a stalled publisher may have written with an older watermark
    one_watermark_key: bool = False
    # issue 37: the committed feed's copy reads its progress before it takes the feed's transactional id
    feed_progress_before_token: bool = False
    # found by this simulation (seed 359 with the committed feed): an eventual hybrid read counts a
    # closing half it meets before its pair's opening half (a late copy of a pair closed below its start)
    hybrid_counts_unpaired_closes: bool = False

    def any(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


@dataclass
class Landed:
    """Ground truth: a dual-write snapshot that became main (the oracle's notion of 'committed')."""

    snapshot_id: int
    writer_id: str
    batch_id: int
    epoch: int
    runs: frozenset[TaskRun]  # the task runs whose records the commit made visible
    inputs: tuple[Row, ...]
    in_force: int = 0  # the writer's newest epoch in force (it had fenced the table) when this landed


@dataclass
class Observed:
    """What one reader returned: (partition, offset) of each log record, and file rows for hybrids."""

    name: str
    consistent: bool
    records: list[LogEntry] = field(default_factory=list)
    file_rows: Counter[str] | None = None
    snapshot_id: int | None = None
    end: dict[int, int] = field(
        default_factory=dict
    )  # where a consistent read stopped: min(log end, watermark + 1)
    final: bool = False  # read at quiescence
    start: dict[int, int] = field(default_factory=dict)  # where a hybrid read's log part started
    # ground truth: the records the reader reached that retention had deleted (it cannot return them)
    gone: set[tuple[int, int]] = field(default_factory=set)
    low: dict[int, int] = field(default_factory=dict)  # a log read's log start when it scanned
    # a follower that stopped with an error (it lagged behind compaction and retention): what it did not
    # return after that is not lost, it is refused
    stopped: bool = False


@dataclass
class World:
    rng: random.Random
    bugs: Bugs
    partitions: int
    keyed: bool
    inputs: dict[str, list[list[Row]]]  # writer -> batches (batch b at index b - 1) of input rows
    log: KafkaLog
    control: ControlTopic
    catalog: Catalog
    feed: CommittedFeed = field(default_factory=CommittedFeed)
    committed_feed: bool = False  # publishers copy to the committed feed (Hazards.committed_feed)
    landed: list[Landed] = field(default_factory=list)
    observed: list[Observed] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    events: Counter[str] = field(default_factory=Counter)  # what happened, for the coverage test
    latest: dict[str, int] = field(default_factory=dict)  # ground truth: each writer's newest epoch
    in_force: dict[str, int] = field(default_factory=dict)  # ground truth: each writer's newest fenced epoch
    checkpoint_every: int = 5  # control_topic.maybe_checkpoint(every=...): small, so checkpoints are frequent
    reconcilers: int = 1  # reconciler actors that may run at once
    reconcile_task_retries: bool = False  # a reconcile produce task may fail after a prefix and be retried
    unknown_commits: float = 0.0  # share of catalog commits that answer "commit state unknown"

    @property
    def primary_key(self) -> list[str]:
        return ["id"] if self.keyed else []

    def note(self, text: str, event: str | None = None) -> None:
        self.trace.append(text)
        if event is not None:
            self.events[event] += 1


# --- helpers mirroring small I/O functions of the real modules ------------------------------------------


def snapshot_commits(view: TableView) -> list[CommitInfo]:
    """tables.snapshot_commits: the LogStore commits in main's live lineage, oldest first."""
    commits = []
    for snapshot in view.ancestors():
        commit = snapshot.commit  # CommitInfo.from_summary(summary, snapshot_id, sequence_number)
        if commit is not None:
            commits.append(commit)
    return commits[::-1]


def merged_state(view: TableView, state: ControlState) -> ControlState:
    """tables.merged_state."""
    for commit in snapshot_commits(view):
        state.commits.setdefault(commit.key, commit)
    return state


def record_missing(world: World, state: ControlState, view: TableView) -> ControlState:
    """publish.record_commits(missing_commits(state, live)), then ``with_commits``: the live commits the
    ledger lacks (a retired batch counts as recorded) are appended, and the new state holds them."""
    added = missing_commits(state, snapshot_commits(view))
    for commit in added:
        world.control.record_commit(commit)
    return with_commits(state, added)


def rows_of(snapshot: Snapshot | None) -> dict[tuple[Any, ...], Row]:
    """A key table's rows by key (decoded from the snapshot's multiset)."""
    import json

    rows: dict[tuple[Any, ...], Row] = {}
    for text in (snapshot.rows if snapshot else Counter()).elements():
        row = json.loads(text)
        rows[(row["id"],)] = row
    return rows


def snapshot_positions(view: TableView, snapshot_id: int | None) -> dict[int, int]:
    """reader.snapshot_positions: a compaction snapshot uses its nearest LogStore ancestor's."""
    for snapshot in view.ancestors(snapshot_id):
        if S_POSITIONS in snapshot.summary:
            return positions_from_json(snapshot.summary[S_POSITIONS])
    return {}


def snapshot_start(view: TableView, chosen: Snapshot) -> tuple[int, frozenset[str] | None]:
    """reader.snapshot_start: (the snapshot's sequence number, the ``logstore.log-included`` of it or of
    its nearest ancestor with positions; None when that summary has none)."""
    for snapshot in view.ancestors(chosen.snapshot_id):
        if S_POSITIONS in snapshot.summary:
            commit = snapshot.commit
            return chosen.sequence_number, commit.included if commit is not None else None
    return chosen.sequence_number, None


# --- the dual-write writer (write.writer.DualWriter) --------------------------------------------------------


@dataclass
class _TaskCursor:
    run: TaskRun
    records: list[tuple[int, bytes | None, bytes]]  # (kafka partition, key, value)
    stop_after: int | None  # the run fails after producing this many records
    produced: list[int] = field(default_factory=list)  # offsets
    partitions: list[int] = field(default_factory=list)


def writer_attempt(world: World, writer_id: str, crashes: bool = True) -> Steps:
    """One writer attempt (one epoch, one Spark application): DualWriter.__init__ + write_frame per batch."""
    rng = world.rng
    yield "claim epoch"  # DualWriter.__init__: control.claim_epoch
    epoch = world.control.claim_epoch(writer_id)
    world.note(f"{writer_id} claims epoch {epoch}")
    world.latest[writer_id] = epoch
    yield "fence"  # DualWriter.__init__: staged_commit.fence (one catalog commit)
    removed = world.catalog.remove_refs(stale_attempt_refs(world.catalog.refs, writer_id, epoch))
    world.in_force[writer_id] = max(world.in_force.get(writer_id, 0), epoch)
    world.note(
        f"{writer_id} epoch {epoch} fences the table: removed {removed}",
        "fence removed refs" if removed else None,
    )
    next_attempt_id = 0  # TaskContext.taskAttemptId(): unique within the application
    for batch_id, rows in enumerate(world.inputs[writer_id], start=1):
        yield f"b{batch_id} state"  # write_frame: self.state().committed(writer, batch)
        state = merged_state(world.catalog.load(), world.control.read())
        if state.committed(writer_id, batch_id) is not None:
            world.note(f"{writer_id} e{epoch} b{batch_id}: committed already, skipped", "batch skipped")
            continue
        yield f"b{batch_id} plan"  # _plan against main as it is now
        plan = plan_batch(rows, world.primary_key, rows_of(world.catalog.load().current()))
        # _produce: tasks by key (repartition), each producing its records in order
        per_task: dict[int, list[tuple[int, bytes | None, bytes]]] = {}
        for index, (kind, row) in enumerate(plan.records):
            key = encode_key(row, world.primary_key)
            if key is not None:
                partition, task = partition_for_key(key, world.partitions), int(row["id"]) % SPARK_TASKS
            else:
                partition, task = rng.randrange(world.partitions), index % SPARK_TASKS
            per_task.setdefault(task, []).append((partition, key, encode_value(kind, row)))
        cursors: list[_TaskCursor] = []
        successful: list[_TaskCursor] = []
        for task, records in sorted(per_task.items()):
            fail = crashes and rng.random() < 0.3
            run = _task_run(world, writer_id, epoch, batch_id, task, 0, next_attempt_id)
            next_attempt_id += 1
            cursors.append(_TaskCursor(run, records, rng.randint(0, len(records)) if fail else None))
        while cursors:
            cursor = rng.choice(cursors)
            if cursor.stop_after is not None and len(cursor.produced) >= cursor.stop_after:
                # the task run fails; a plain task retry counts the attempt number up, a stage
                # resubmission (fetch failure) starts it at 0 again; the attempt id is always new
                resubmit = rng.random() < 0.6
                number = 0 if resubmit else cursor.run.attempt_number + 1
                run = _task_run(
                    world, writer_id, epoch, batch_id, cursor.run.partition_id, number, next_attempt_id
                )
                next_attempt_id += 1
                world.note(
                    f"{writer_id} e{epoch} b{batch_id} task {cursor.run.tag} failed after "
                    f"{len(cursor.produced)} records; retry {run.tag}",
                    "stage resubmitted" if resubmit else "task retried",
                )
                cursors[cursors.index(cursor)] = _TaskCursor(run, cursor.records, None)
                continue
            if len(cursor.produced) == len(cursor.records):
                cursors.remove(cursor)
                successful.append(cursor)  # the driver collects this task's report
                continue
            yield f"b{batch_id} produce"  # produce_partition: one record
            partition, key, value = cursor.records[len(cursor.produced)]
            meta = RecordMeta(writer_id, epoch, batch_id, cursor.run.tag)
            cursor.produced.append(world.log.append(partition, key, value, encode_headers(meta), cursor.run))
            cursor.partitions.append(partition)
            if world.latest[writer_id] != epoch:
                world.events["zombie produced after a newer epoch was claimed"] += 1
        offsets: dict[int, tuple[int, int]] = {}
        for cursor in successful:  # _produce: per partition min first / max last of successful tasks
            for partition, offset in zip(cursor.partitions, cursor.produced, strict=True):
                span = offsets.get(partition)
                offsets[partition] = (
                    (offset, offset) if span is None else (min(span[0], offset), max(span[1], offset))
                )
        commit = CommitInfo(
            writer_id=writer_id,
            batch_id=batch_id,
            epoch=epoch,
            offsets=offsets,
            tasks=frozenset(c.run.tag for c in successful),
            record_count=sum(len(c.produced) for c in successful),
        )
        runs = frozenset(c.run for c in successful)
        committer = _commit_once_unconditionally if world.bugs.decide_once else _commit
        landed = yield from committer(world, commit, plan.final, rows, runs)
        if landed is None:
            return  # FencedError / CommitConflictError: this attempt stops
        yield f"b{batch_id} ledger"  # write_frame: control.record_commit (unless an older epoch's won)
        if landed.epoch == epoch:
            world.control.record_commit(landed)


def _task_run(
    world: World, writer: str, epoch: int, batch: int, partition: int, number: int, attempt_id: int
) -> TaskRun:
    tag = f"{partition}.{number}" if world.bugs.attempt_number_tags else task_identity(partition, attempt_id)
    return TaskRun(writer, epoch, batch, partition, number, attempt_id, tag)


def _staged_rows(
    world: World, base: Snapshot | None, final: dict[Any, Any], rows: Iterable[Row]
) -> Counter[str]:
    """The MERGE (key table) or append written to the staging branch on top of ``base``."""
    if world.keyed:
        merged = apply_final(rows_of(base), final)
        return Counter(row_id(row) for row in merged.values())
    result = Counter(base.rows if base else Counter())
    result.update(row_id({k: v for k, v in row.items() if k != "op"}) for row in rows)
    return result


def _load_base(world: World) -> Steps:
    """staged_commit.load_base: an empty table first gets an empty base snapshot (a CAS from nothing)."""
    view = world.catalog.load()
    if view.main is None:
        snapshot = world.catalog.stage(None, {S_OPERATION: OP_BASE}, Counter(), "base")
        world.catalog.cas_main(None, snapshot.snapshot_id, ("base",))
        world.catalog.drop_branch("base")
        yield "base snapshot"


def _commit(
    world: World, commit: CommitInfo, final: dict[Any, Any], rows: list[Row], runs: frozenset[TaskRun]
) -> Generator[str, None, CommitInfo | None]:
    """committing.commit_batch / run_attempt: open the attempt's refs, decide, stage, publish by CAS."""
    name = f"{commit.writer_id} e{commit.epoch} b{commit.batch_id}"
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        yield "commit: load base"  # staged_commit.load_base
        yield from _load_base(world)
        base = world.catalog.load()
        yield "commit: open attempt"  # staged_commit.open_attempt: branch and fence tag at the base
        refs = attempt_refs(commit.writer_id, commit.batch_id, commit.epoch, attempt)
        world.catalog.open_attempt(base.main, refs.branch, refs.fence_tag)
        yield "commit: read control"  # merged_state(base.table, control.read())
        state = merged_state(base, world.control.read())
        decision = decide_on(state, commit.writer_id, commit.batch_id, commit.epoch)
        yield "commit:decided"  # pause_point("commit:decided")
        if decision.verdict is not Verdict.PROCEED:
            world.catalog.remove_refs([refs.branch, refs.fence_tag])  # run_attempt: drop_attempt
        if decision.verdict is Verdict.ALREADY_COMMITTED and decision.existing is not None:
            world.note(f"{name}: {decision.reason}", "already committed at commit")
            return decision.existing
        if decision.verdict is Verdict.FENCED:
            world.note(f"{name}: fenced ({decision.reason})", "fenced")
            return None
        staged = _staged(world, commit, state)
        positions = staged.positions
        # write_branch: Iceberg writes the branch (and recreates it, from the snapshot given, if a fence
        # removed it meanwhile)
        snapshot = world.catalog.stage(
            base.main, staged.to_summary(), _staged_rows(world, base.current(), final, rows), refs.branch
        )
        yield "commit:before-publish"  # branch_head, check_staged_head; pause_point("commit:before-publish")
        required = () if world.bugs.ignore_fence else (refs.fence_tag,)
        unknown = world.rng.random() < world.unknown_commits
        applied = (not unknown or world.rng.random() < 0.5) and world.catalog.cas_main(
            base.main, snapshot.snapshot_id, (refs.branch, refs.fence_tag), required
        )
        if applied:
            world.landed.append(
                Landed(
                    snapshot.snapshot_id,
                    commit.writer_id,
                    commit.batch_id,
                    commit.epoch,
                    runs,
                    tuple(rows),
                    world.in_force.get(commit.writer_id, 0),
                )
            )
            world.note(f"{name} commits snapshot {snapshot.snapshot_id} positions {positions}", "commit")
        if unknown:  # CommitStateUnknownException: the catalog may or may not have applied it
            world.note(f"{name}: commit state unknown (applied: {applied})", "commit state unknown")
            if world.bugs.unknown_as_success:
                return replace(
                    staged, snapshot_id=snapshot.snapshot_id, sequence_number=snapshot.sequence_number
                )
            # staged_commit.is_lost_race: decide again on a new base (its lineage holds the commit if
            # it applied: ALREADY_COMMITTED by this epoch, then its ledger entry)
            world.catalog.remove_refs([refs.branch, refs.fence_tag])  # drop_attempt
            continue
        if applied:
            return replace(staged, snapshot_id=snapshot.snapshot_id, sequence_number=snapshot.sequence_number)
        fenced = refs.fence_tag not in world.catalog.refs
        world.catalog.remove_refs([refs.branch, refs.fence_tag])  # drop_attempt
        if fenced:  # staged_commit.check_not_fenced: FencedError
            world.note(f"{name}: its fence tag is gone, fenced by a newer epoch", "fenced at publish")
            return None
        world.note(f"{name}: main moved, compare-and-set lost", "commit CAS lost")
    return None


def _staged(world: World, commit: CommitInfo, state: ControlState) -> CommitInfo:
    """core.visibility.with_positions, or hole 4's old positions (max last + 1) under that bug."""
    if not world.bugs.advance_positions:
        return with_positions(commit, state)
    positions = advance_positions(recorded_positions(state.commits.values()), commit.offsets)
    return replace(
        commit, positions=positions, included=included_commits(state.commits.values(), positions, commit)
    )


def _commit_once_unconditionally(
    world: World, commit: CommitInfo, final: dict[Any, Any], rows: list[Row], runs: frozenset[TaskRun]
) -> Generator[str, None, CommitInfo | None]:
    """Hole 1 (old code): check the epoch once, then MERGE with Iceberg's own retries (no re-decide)."""
    name = f"{commit.writer_id} e{commit.epoch} b{commit.batch_id}"
    yield "commit: fence check"
    state = merged_state(world.catalog.load(), world.control.read())
    decision = decide_on(state, commit.writer_id, commit.batch_id, commit.epoch)
    if decision.verdict is Verdict.ALREADY_COMMITTED and decision.existing is not None:
        return decision.existing
    if decision.verdict is Verdict.FENCED:
        return None
    staged = _staged(world, commit, state)
    yield "commit: MERGE"
    while True:  # Iceberg re-applies a conflicting MERGE on the new main (commit_retry)
        yield from _load_base(world)
        base = world.catalog.load()
        snapshot = world.catalog.stage(
            base.main, staged.to_summary(), _staged_rows(world, base.current(), final, rows), f"merge/{name}"
        )
        yield "commit: swap"
        if world.catalog.cas_main(base.main, snapshot.snapshot_id, (f"merge/{name}",)):
            world.landed.append(
                Landed(
                    snapshot.snapshot_id, commit.writer_id, commit.batch_id, commit.epoch, runs, tuple(rows)
                )
            )
            world.note(f"{name} commits snapshot {snapshot.snapshot_id} (no re-decide)")
            return replace(staged, snapshot_id=snapshot.snapshot_id, sequence_number=snapshot.sequence_number)


# --- publisher (publish.publish_visible_offsets) ----------------------------------------------------------


def publisher(world: World) -> Steps:
    """publish.publish_visible_offsets: bounds, control state, ledger, ``scan_watermark``, checkpoint."""
    if world.bugs.state_before_ends:
        yield "publish: read control"  # hole 3: the control state first ...
        state = world.control.read()
        yield "publish: offsets"  # ... the log's end offsets second
        bounds = world.log.bounds()
    else:
        yield "publish: offsets"  # kafka_client.partition_offsets first
        bounds = world.log.bounds()
        yield "publish:offsets-read"  # pause point, then ctl.read()
        state = world.control.read()
    yield "publish: load table"  # handle.load(); record_commits(missing_commits(...)); with_commits
    state = record_missing(world, state, world.catalog.load())
    start, end = watermark_scan_range(state.watermark, bounds)
    yield "publish: scan"  # kafka_client.scan(cons, topic, start, end)
    if world.log.deleted(start, end) and not world.bugs.publish_skips_deleted:
        # Records deleted since the bounds were read. The publish fails here, as the real one does (its
        # consumer resets offsets with 'error'); the next publish starts at the new log start. The old
        # scan skipped them without an error: publish_skips_deleted (README, Findings).
        world.note(f"publisher: scan from {start} failed, retention deleted records", "publish scan failed")
        return
    records = ((e.partition, e.offset, _scan_headers(world, e)) for e in world.log.scan(start, end))
    move = scan_watermark(records, state, start, end)
    previous, new = state.watermark, move.watermark
    if any(new.get(p, -1) > previous.get(p, -1) for p in new):
        settled = dict(move.settled)
        if world.bugs.no_holes:
            settled["holes"] = {}
        value = {"offsets": {str(p): o for p, o in sorted(new.items())}, **settled}
        yield "publish: append watermark"  # ctl.append(watermark_key(...), watermark_value(move, ...))
        key = (
            control.K_WATERMARK
            if world.bugs.one_watermark_key
            else control.watermark_key(f"{offset_id(world)}")
        )
        offset = world.control.append(key, value)
        world.note(
            f"publisher: watermark {previous} -> {new} (blocked by {move.blocked_by}), settled {settled}",
            "watermark moved",
        )
        if offset == state.end_offset:  # nothing came between: the checkpoint can include this move
            state = control.fold([control.ControlRecord(key, value, offset)], state)
        if settled["holes"]:
            world.events["watermark settled a hole"] += 1
    if move.blocked_by:
        world.events["watermark blocked by an undecided record"] += 1
    if world.committed_feed:
        yield "publish:watermark-moved"
        yield from feed_copy(world, state, move.watermark, {p: low for p, (low, _) in bounds.items()})
    yield from maybe_checkpoint(world, state, {p: low for p, (low, _) in bounds.items()})


def feed_copy(
    world: World, state: ControlState, watermark: dict[int, int], log_start: dict[int, int]
) -> Steps:
    """publish/feed.copy_to_feed: take the feed's token, *then* read its progress, copy what
    ``FeedCopy`` takes from the progress to the watermark, commit the copies with the new progress."""
    if world.bugs.feed_progress_before_token:
        yield "feed: read progress"
        progress = dict(world.feed.progress)
        yield "feed: token"
        token = world.feed.take_token()
    else:
        yield "feed: token"  # init_transactions of the feed's transactional id
        token = world.feed.take_token()
        yield "feed:token-taken"  # pause point, then read_progress (the last committed record)
        progress = dict(world.feed.progress)
    span = copy_range(progress, watermark, log_start)
    if span.empty and not span.gaps:
        return
    yield "feed: scan"
    if world.log.deleted(span.start, span.end):  # its consumer resets offsets with 'error': it fails
        world.note("feed copy: retention deleted records while it scanned", "feed copy failed")
        return
    copy = FeedCopy(state, watermark, span.start)
    copies = [e for e in world.log.scan(span.start, span.end) if copy.take(e.partition, e.offset, e.headers)]
    yield "feed:copied"  # pause point: the copies and the progress sent, then commit_transaction
    if world.feed.commit(token, copies, copy.finish(span.end)):
        world.feed.gaps.update((p, o) for p, (low, high) in span.gaps.items() for o in range(low, high))
        world.note(f"feed: copied {len(copies)} of {span.start} to {span.end}", "feed copy committed")
    else:
        world.note("feed: copy fenced by a newer publisher", "feed copy fenced")


def offset_id(world: World) -> int:
    """A unique id for a watermark record's key (the real publisher's is random)."""
    return len(world.control.records)


def _scan_headers(world: World, entry: LogEntry) -> tuple[tuple[str, bytes], ...]:
    """A record's headers as the publish scan gets them; ``split_pairs`` hides ``reassert-half`` (the
    watermark then ignores reassert pairs, as before the fix)."""
    if not world.bugs.split_pairs:
        return entry.headers
    return tuple((k, v) for k, v in entry.headers if k != H_PAIR)


def maybe_checkpoint(world: World, state: ControlState, log_start: dict[int, int]) -> Steps:
    """checkpoints.maybe_checkpoint: when due, take the checkpointers' token (``init_transactions`` of
    their shared transactional id), read the control state again, and unless the latest checkpoint is as
    new, retire, write the checkpoint in the token's transaction, then tombstone the retired keys."""
    if state.end_offset - state.checkpoint_start < world.checkpoint_every:
        return
    token = None
    if not world.bugs.stale_checkpoint:
        yield "checkpoint: token"  # checkpoints._Checkpointer: init_transactions (fences older tokens)
        token = world.control.checkpoint_token()
        yield "checkpoint: read control"  # read_state(ctl), after the token
        state = world.control.read(full=False)
        _, latest_next = world.control.latest(full=False)
        if latest_next >= state.end_offset:  # checkpoints only move forward
            world.note("publisher: the latest checkpoint is as new: none written", "checkpoint skipped")
            return
    if world.bugs.retire_unsettled:  # as if retention had deleted every record
        log_start = {p: 1 << 62 for p in range(world.partitions)}
    kept, gone = retire(state, log_start)
    through = state.end_offset - 1
    data = encode_state(kept, through)
    yield "checkpoint: write"  # checkpoints._append: in the token's transaction
    _, latest_next = world.control.latest(full=False)
    stale = latest_next > through + 1
    if not world.control.write_checkpoint(data, token):
        world.note(f"publisher: checkpoint through {through} fenced by a newer token", "checkpoint fenced")
        return
    world.note(
        f"publisher: checkpoint through control offset {through}: {len(kept.commits)} ledger entries kept,"
        f" retired {gone}",
        "checkpoint written",
    )
    if stale:  # only without the token (stale_checkpoint): an older checkpoint became the latest
        world.events["a checkpoint older than the latest was written"] += 1
    if gone:
        world.events["commits retired"] += 1
    if any(not retirable(state.commits[key], {}, state.settled) for key in gone):
        world.events["commit retired because retention deleted its records"] += 1
    for key in gone:
        yield "checkpoint: tombstone"  # ctl.append(ledger_key, None)
        world.control.append(control.ledger_key(state.commits[key]), None)
    for key in state.watermark_keys:  # the watermark records the checkpoint holds
        yield "checkpoint: tombstone"
        world.control.append(key, None)


def cleaner(world: World) -> Steps:
    """Kafka's log cleaner on the control topic (compaction), once."""
    yield "cleaner"
    removed = world.control.clean()
    if removed:
        tombstones = [o for o in removed if world.control.records[o].value is None]
        world.note(f"cleaner: removed control offsets {removed}", "control topic compacted")
        if any(world.control.records[o].key.startswith(control.K_COMMIT) for o in removed):
            world.events["compaction removed a ledger entry"] += 1
        if tombstones:
            world.events["compaction removed a tombstone"] += 1


# --- reconciler (the steps of reconciler._run) -------------------------------------------------------------

LEASE_TTL = 80  # scheduler ticks (control-topic stamps are the scheduler's clock)
LEASE_MARGIN = 4  # reconciler.LEASE_SKEW_MARGIN_MS: a holder stops acting this long before the expiry


class _SimLease:
    """reconciler.ReconcilerLease over the model: claim, check (renewing when half the time is gone),
    release. The holder is whoever the control topic's fold names (``ControlState.live_lease``); the
    run's own clock is the scheduler's (a paused actor's clock runs on: it stalled)."""

    def __init__(self, world: World, owner: str) -> None:
        self.world, self.owner = world, owner
        self.lease_id: int | None = None
        self.sent: dict[int, int] = {}

    def _append(self, value: dict[str, Any]) -> int:
        offset = self.world.control.append(control.lease_key(rec.LEASE_NAME), value)
        self.sent[offset] = self.world.control.now
        return offset

    def claim(self) -> int:
        return self._append({"owner": self.owner, "ttl_ms": LEASE_TTL}) + 1

    def holds(self, lease_id: int) -> bool:
        """acquire's read: True when the log names this claim the holder (else it steps aside)."""
        holder = self.world.control.read().live_lease(rec.LEASE_NAME)
        if holder is None or holder.lease_id != lease_id:
            self.world.control.append(control.lease_key(rec.LEASE_NAME), {"release": lease_id})
            return False
        self.lease_id = lease_id
        return True

    def check(self) -> bool:
        """ReconcilerLease.check: False (FencedError) when the log names another holder or this run's
        own time is up; renews when less than half of it is left."""
        holder = self.world.control.read().live_lease(rec.LEASE_NAME)
        if holder is None or holder.lease_id != self.lease_id:
            return False
        sent = self.sent.get(holder.basis_offset)
        left = -1 if sent is None else sent + LEASE_TTL - LEASE_MARGIN - self.world.control.now
        if left <= 0:
            return False
        if left < LEASE_TTL / 2:
            self._append({"renews": self.lease_id, "owner": self.owner, "ttl_ms": LEASE_TTL})
        return True

    def release(self) -> None:
        if self.lease_id is not None:
            self.world.control.append(control.lease_key(rec.LEASE_NAME), {"release": self.lease_id})


def reconciler(world: World, name: str = "reconciler") -> Steps:
    lease = _SimLease(world, name)
    for tries in range(1, 4):  # the scheduler (Airflow) tries again later when another holds the lease
        yield "reconcile: claim lease"  # take_lease: ReconcilerLease.acquire
        lease_id = lease.claim()
        yield "reconcile: lease holder"  # acquire: ctl.read().live_lease(...)
        if lease.holds(lease_id):
            break
        world.note(f"{name}: another reconciler holds the lease", "reconciler found the lease held")
        if tries == 3:
            return
        wake = world.control.now + LEASE_TTL // 2
        while world.control.now < wake:
            yield "reconcile: wait"
    if world.events["reconciler found the lease held"] or world.reconcilers > 1:
        world.events["reconcilers overlapped"] += 1
    yield "reconcile: bounds"  # safe_point: the log's end offsets
    bounds = world.log.bounds()
    yield "reconcile: read control"  # control_state: ctl.read(), after the safe point
    state = world.control.read()
    yield "reconcile: record ledger"  # control_state: record_commits(missing_commits(...)), with_commits
    state = record_missing(world, state, world.catalog.load())
    window = reconciler_steps.plan_window(state, bounds)  # a position below the log start is a gap
    yield "reconcile: scan"  # scan.py: kafka_client.scan(..., skip_reset=True): deleted records skipped
    records = [
        rec.LogRecordIn(e.partition, e.offset, e.key, e.headers, e.value)
        for e in world.log.scan(window.starts, window.safe_point)
    ]
    plans, _ = rec.plan_partitions(records, state, window.starts, window.safe_point, window.lookback)
    gaps = [*window.gaps, *rec.scan_gaps(plan.stats for plan in plans)]
    positions = reconciler_steps.next_positions(plan.stats for plan in plans)
    pending = rec.pending_attempts(window.carried, (plan.stats for plan in plans))
    if world.bugs.forget_pending:
        pending = {}
    if any(plan.output_count for plan in plans):
        yield "reconcile: check lease"  # produce: lease.check() before the first record
        if not lease.check():
            world.note(f"{name}: lease lost before producing (FencedError)", "reconciler fenced")
            return
    yield "reconcile:produce"  # the stall that matters: past its lease between its check and its records
    if world.reconcilers > 1 and world.rng.random() < 0.5:
        # a GC pause, a SIGSTOP, renewals failing: this run stops here until its lease has expired and
        # (often) the other reconciler took it and planned the same window
        expiry = max(lease.sent.values()) + LEASE_TTL
        while world.control.now <= expiry:
            yield "reconcile: stalled"
    if lease.sent and world.control.now > max(lease.sent.values()) + LEASE_TTL:
        world.events["reconciler produced past its lease"] += 1
    output: dict[int, tuple[int, int]] = {}
    for plan in plans:  # produce: one Spark task per Kafka partition
        outputs = list(plan.iter_outputs())
        tries = [outputs]
        if outputs and world.reconcile_task_retries and world.rng.random() < 0.3:
            # the task flushes a prefix, fails (or loses its executor), and Spark runs it again: the
            # retry sends the partition's records again; the driver keeps the retry's report
            tries = [outputs[: world.rng.randint(0, len(outputs))], outputs]
            world.note(f"{name}: produce task of partition {plan.partition} failed, retried")
            world.events["reconcile task retried"] += 1
        for attempt, batch in enumerate(tries):
            for out in batch:
                yield "reconcile: produce"
                headers = out.headers(lease_id, window.run)
                offset = world.log.append(out.partition, out.key, out.value, headers, None)
                world.events[f"{out.record_type.value} written"] += 1
                if attempt == len(tries) - 1:
                    output[out.partition] = ranges.widen(output.get(out.partition), offset, offset)
    for gap in gaps:  # record_gaps: the log needs a hybrid re-read
        yield "reconcile: record gap"
        world.control.append(
            control.gap_key(gap.partition), rec.gap_value(gap, run=window.run, lease_id=lease_id, now_ms=0)
        )
        world.note(f"{name} run {window.run}: gap {gap.to_dict()}", f"retention gap ({gap.detected})")
    if reconciler_steps.progress_changed(state, positions, output, gaps, pending):
        yield "reconcile: check lease"  # record_progress: lease.check()
        if not lease.check():
            world.note(f"{name}: lease lost before its progress (FencedError)", "reconciler fenced")
            return
        yield "reconcile:before-progress"
        value = rec.progress_value(
            positions=positions,
            safe_point=window.safe_point,
            output=output,
            pending=pending,
            lease_id=lease_id,
            run=window.run,
            owner=name,
            summary={},
            now_ms=0,
        )
        world.control.append(control.K_RECONCILE, value)
        world.note(f"{name} run {window.run}: output {output}, positions {positions}", "reconciler output")
    yield "reconcile: release"
    lease.release()


# --- compaction (compaction.compact_job + compaction.plan_expiry / secure_ledger) ---------------------------


def compaction(world: World) -> Steps:
    while True:  # rewrite data files: a replace commit, retried by Iceberg on the new main
        yield "compact: load"
        view = world.catalog.load()
        current = view.current()
        if current is None:
            return
        snapshot = world.catalog.stage(
            current.snapshot_id, {S_OPERATION: OP_COMPACTION}, Counter(current.rows), "compact"
        )
        yield "compact: commit"
        if world.catalog.cas_main(current.snapshot_id, snapshot.snapshot_id, ("compact",)):
            world.note(f"compaction: snapshot {snapshot.snapshot_id}", "compaction")
            break
        world.catalog.drop_branch("compact")
        world.note("compaction: main moved, retried on the new main", "compaction CAS lost")
    yield "expire: plan"
    view = world.catalog.load()
    infos = [
        SnapshotInfo(
            s.snapshot_id,
            s.parent_id,
            s.timestamp_ms,
            S_POSITIONS in s.summary,
            s.summary.get(S_OPERATION),
            s.commit,
        )
        for s in view.snapshots.values()
    ]
    now = world.catalog.last_sequence
    plan = plan_expiry(
        infos, view.main, RetentionPolicy(world.rng.randint(0, 3), world.rng.randint(1, 2)), now
    )
    yield "expire: secure ledger"  # secure_ledger: record the missing commits, read back, check
    record_missing(world, world.control.read(), view)
    missing = unrecorded_commits(world.control.read(), plan.expiring_commits)
    if missing:  # CompactionSafetyError
        world.note(f"expiry refused: {missing} not in the ledger", "expiry refused")
        return
    yield "expire: expire"
    removed = world.catalog.expire(plan.expire)
    world.note(f"expiry: removed {removed}", "snapshots expired" if removed else None)


# --- readers ----------------------------------------------------------------------------------------------


def consistent_follower(world: World, seen: Observed) -> Steps:
    """follow.follow (consistent): tail log and control topic; release decided records <= watermark."""
    state, control_next = world.control.latest()  # ControlFollower.__init__: the latest checkpoint ...
    state = merged_state(world.catalog.load(), state)  # ... with the live snapshots' commits
    if control_next:
        world.note(
            f"{seen.name}: starts from the checkpoint through {control_next - 1}",
            "follower from a checkpoint",
        )
    log_next = dict.fromkeys(range(world.partitions), 0)
    pending: dict[int, list[LogEntry]] = {p: [] for p in range(world.partitions)}
    while True:
        yield "follow: poll control"  # ControlFollower.poll
        end = len(world.control.records)
        skipped = any(offset in world.control.removed for offset in range(control_next, end))
        if skipped and not world.bugs.follower_ignores_compaction:
            # compaction removed records it had not read: re-base on the latest checkpoint when that one
            # is at or past its position (ControlFollower.poll)
            checkpoint, checkpoint_next = world.control.latest(full=False)
            if checkpoint_next > control_next:
                state = merged_state(world.catalog.load(), control.rebased(checkpoint, state))
                control_next = checkpoint_next
                world.note(f"{seen.name}: re-based on the checkpoint through {checkpoint_next - 1}")
                world.events["follower re-based on a checkpoint after compaction"] += 1
        control.fold(world.control.live(control_next), state)
        control_next = end
        unknown = [
            e
            for messages in pending.values()
            for e in messages
            if retired_unknown(
                decode_headers(e.headers), e.partition, e.offset, state, world.log.log_start[e.partition]
            )
        ]
        if unknown:  # follow: ControlTopicLagError; the records it held need a hybrid re-read
            world.note(
                f"{seen.name}: stops: it held {unknown[0]} of a batch retired since", "follower stopped"
            )
            seen.stopped = True
            return
        yield "follow: poll log"  # cons.consume (a position below the log start resets to it)
        ends = world.log.end_offsets()
        _reach(world, seen, log_next, ends)
        for entry in world.log.scan(log_next, ends):
            pending[entry.partition].append(entry)
        log_next = ends
        for partition, messages in pending.items():  # _release
            mark = state.watermark.get(partition, -1)
            ready = 0
            while (
                ready < len(messages)
                and messages[ready].offset <= mark
                and (world.bugs.follower_drops_undecided or _decided(messages[ready], state))
            ):
                ready += 1
            if ready < len(messages) and messages[ready].offset <= mark:
                world.events["follower held an undecided record below the watermark"] += 1
            for entry in messages[:ready]:
                meta = decode_headers(entry.headers)
                keep, _ = ReadFilter(state, consistent=True).decide(meta, partition, entry.offset)
                _note_settled(world, meta, entry, state)
                if keep:
                    seen.records.append(entry)
            del messages[:ready]


def _reach(world: World, seen: Observed, start: dict[int, int], end: dict[int, int]) -> None:
    """Ground truth for the oracle: the records of ``start`` to ``end`` a reader reached after retention
    deleted them."""
    gone = world.log.deleted(start, end)
    if gone - seen.gone:
        seen.gone |= gone
        world.events["retention deleted records a reader had not read"] += 1


def _note_settled(world: World, meta: Any, entry: LogEntry, state: ControlState) -> None:
    """Coverage: a record classified by a publish scan's settled range (its ledger entry retired)."""
    if meta.record_type is RecordType.DATA and (meta.writer_id, meta.batch_id) not in state.commits:
        hole = state.settled_hole(entry.partition, entry.offset)
        if hole is not None:
            world.events["read a retired commit's record"] += 1
            if hole:
                world.events[f"read a settled {hole} record"] += 1


def _decided(entry: LogEntry, state: ControlState) -> bool:
    """follow._decided."""
    return not classify(decode_headers(entry.headers), entry.partition, entry.offset, state).undecided


def eventual_follower(world: World, seen: Observed) -> Steps:
    """follow.follow (eventual): every record as it arrives (one ``ReadFilter`` for the whole follow: a
    later copy of a reconciler record is not returned)."""
    log_next = dict.fromkeys(range(world.partitions), 0)
    read_filter = ReadFilter(None, consistent=False)
    while True:
        yield "follow: poll log"
        ends = world.log.end_offsets()
        _reach(world, seen, log_next, ends)
        for entry in world.log.scan(log_next, ends):
            if _keeps(world, read_filter, decode_headers(entry.headers), entry):
                seen.records.append(entry)
        log_next = ends


def _keeps(world: World, read_filter: ReadFilter, meta: Any, entry: LogEntry) -> bool:
    """``ReadFilter.decide``; ``readers_count_copies`` keeps every copy of a reconciler record."""
    if world.bugs.readers_count_copies:
        return read_filter.rule(meta, entry.partition, entry.offset)[0]
    keep, decision = read_filter.decide(meta, entry.partition, entry.offset)
    if decision is Decision.DUPLICATE:
        world.events["reader skipped a copy of a reconciler record"] += 1
    return keep


def log_read(
    world: World,
    seen: Observed,
    start: dict[int, int],
    consistent: bool,
    hybrid_of: Snapshot | None = None,
    view: TableView | None = None,
) -> Generator[str, None, dict[int, int]]:
    """reader.LogReader.iterate: bounds, then the state; consistent reads stop at the watermark + 1.

    Records retention deletes between the bounds and the scan are skipped without an error: the
    consumer's ``auto.offset.reset=earliest`` moves it to the log start (librdkafka reports an offset
    reset as an error only with ``auto.offset.reset=error``). Returns where the read ended.
    """
    view = view or world.catalog.load()  # LogReader.__init__: self.table (read_hybrid passes its own)
    yield "read: bounds"  # partition_offsets
    bounds = world.log.bounds()
    first = {p: max(start.get(p, 0), low) for p, (low, _) in bounds.items()}  # start_offsets
    last = {p: high for p, (_, high) in bounds.items()}
    hybrid = hybrid_of is not None
    state = None
    if consistent or hybrid:
        yield "read: control"  # self.state(): merged_state(self.table, control.read())
        state = merged_state(view, world.control.read())
    if hybrid_of is not None:  # reader.snapshot_start: the snapshot's sequence and log-included
        sequence, included = snapshot_start(view, hybrid_of)
        if world.bugs.no_included:
            included = None
        read_filter = ReadFilter(state, consistent, sequence, dict(first), included)
        if world.bugs.hybrid_counts_unpaired_closes:
            object.__setattr__(read_filter, "_copies", FirstCopies())
    else:
        read_filter = ReadFilter(state, consistent)
    if state is not None and consistent:
        last = {p: min(last[p], state.watermark.get(p, -1) + 1) for p in last}
        seen.end = dict(last)
    if world.log.deleted(first, last):
        world.note(
            f"{seen.name}: records deleted between its bounds and its scan", "read skipped deleted records"
        )
    _reach(world, seen, start, last)
    seen.start, seen.low = first, dict(enumerate(world.log.log_start))
    for entry in world.log.scan(first, last):
        meta = decode_headers(entry.headers)
        keep = _keeps(world, read_filter, meta, entry)
        if state is not None:
            _note_settled(world, meta, entry, state)
        if keep:
            seen.records.append(entry)
    return last


def incremental_reader(world: World, seen: Observed, reads: int) -> Steps:
    """A consistent log read resumed from where the previous one ended (an incremental consumer)."""
    start = dict.fromkeys(range(world.partitions), 0)
    for _ in range(reads):
        start = yield from log_read(world, seen, start, consistent=True)


def batch_reader(world: World, consistent: bool, final: bool = False) -> Steps:
    """reader.read_log from earliest: the log start (records below it are the read's ``gone``)."""
    seen = Observed(f"batch {'consistent' if consistent else 'eventual'} read", consistent, final=final)
    world.observed.append(seen)
    yield from log_read(world, seen, dict.fromkeys(range(world.partitions), 0), consistent)


def hybrid_reader(
    world: World, consistent: bool, snapshot_id: int | None = None, final: bool = False
) -> Steps:
    """reader.read_hybrid: a snapshot's rows, then the log from its positions (or the log start)."""
    yield "hybrid: load"
    view = world.catalog.load()
    lineage = view.ancestors()
    if not lineage:
        return
    chosen = view.snapshots[snapshot_id] if snapshot_id is not None else world.rng.choice(lineage)
    chain = view.ancestors(chosen.snapshot_id)
    if not any(S_POSITIONS in s.summary for s in chain) and chain[-1].parent_id is not None:
        # reader._logstore_summary: OptionError (a staging ref kept it while its ancestors expired)
        world.note(
            f"hybrid read of snapshot {chosen.snapshot_id} refused: its positions expired", "hybrid refused"
        )
        return
    positions = snapshot_positions(view, chosen.snapshot_id)
    start = {p: positions.get(p, 0) for p in range(world.partitions)}
    seen = Observed(
        f"hybrid {'consistent' if consistent else 'eventual'} read of snapshot {chosen.snapshot_id}"
        f" from {start}",
        consistent,
        file_rows=Counter(chosen.rows),
        snapshot_id=chosen.snapshot_id,
        final=final,
        start=start,
    )
    world.observed.append(seen)
    yield from log_read(world, seen, start, consistent, hybrid_of=chosen, view=view)


# --- the log topic's retention ----------------------------------------------------------------------------


def retention(world: World) -> Steps:
    """Kafka's time-based retention, once: a partition's oldest records (a segment) are deleted, whether
    anyone read, settled or reconciled them or not."""
    yield "retention"
    partition = world.rng.randrange(world.partitions)
    end = world.log.end_offsets()[partition]
    upto = end if world.rng.random() < 0.3 else world.log.log_start[partition] + world.rng.randint(1, 3)
    deleted = world.log.delete_before(partition, upto)
    if deleted:
        world.note(f"retention: partition {partition} deleted offsets {deleted.start}-{deleted.stop - 1}")
