"""Which log records a consistent reader may see, and how far the visibility watermark may move.

Every data record is tagged (writer, batch, epoch, task attempt). Against the control state it is:

- ``COMMITTED``: its (writer, batch) was committed by the same epoch and the commit covers its offset
  and task attempt; a consistent reader returns it, exactly once.
- ``REDUNDANT``: its (writer, batch) was committed by another epoch, or by this epoch from another task
  attempt / outside the committed offsets, or its epoch is dead and a newer epoch of the writer has
  committed past its batch. Reconciliation reverses it.
- ``DEAD_PENDING``: its epoch is dead (a newer epoch was claimed) but no newer epoch has committed past
  its batch yet; it will never commit, but reconciliation waits for the successor before reversing.
- ``IN_FLIGHT``: its epoch is the writer's newest and the batch has not committed (yet).
- ``FOREIGN``: LogStore-looking headers, but the writer never claimed that epoch in the control topic
  (every LogStore writer claims its epoch before producing): never visible, never blocks the watermark.
- ``LOG_ONLY``: written with emit mode ``log``; eventual readers see it, consistent readers never do.
- ``REVERSAL`` / ``REASSERT``: written by reconciliation; eventual readers only.
- ``DUPLICATE``: a second copy of a reconciler record (the same :func:`output_identity`: a reconcile
  task retried after a partial flush, or two reconcilers that planned the same window); every reader and
  the next reconciler count only the first copy in log order, so copies change no fold. An eventual
  hybrid read also drops a reassert pair's closing half met before the pair's opening half (H2).

The watermark of a partition is the highest offset below which no record is undecided
(``IN_FLIGHT`` or ``DEAD_PENDING``); it never moves backwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from airflow_logstore.core import ranges
from airflow_logstore.core.codec import RecordMeta, RecordType, decode_headers
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.exceptions import RecordDecodeError

if TYPE_CHECKING:
    import numpy as np


class Decision(StrEnum):
    COMMITTED = "committed"
    REDUNDANT = "redundant"
    DEAD_PENDING = "dead-pending"
    IN_FLIGHT = "in-flight"
    LOG_ONLY = "log-only"
    REVERSAL = "reversal"
    REASSERT = "reassert"
    FOREIGN = "foreign"
    DUPLICATE = "duplicate"

    @property
    def undecided(self) -> bool:
        return self in (Decision.IN_FLIGHT, Decision.DEAD_PENDING)


def classify(meta: RecordMeta, partition: int, offset: int, state: ControlState) -> Decision:
    if meta.record_type is RecordType.REVERSAL:
        return Decision.REVERSAL
    if meta.record_type is RecordType.REASSERT:
        return Decision.REASSERT
    commit = state.commits.get((meta.writer_id, meta.batch_id))
    if commit is not None:
        if commit.epoch == meta.epoch and commit.covers(partition, offset, meta.task):
            return Decision.LOG_ONLY if meta.log_only else Decision.COMMITTED
        return Decision.REDUNDANT
    settled = state.settled_hole(partition, offset)
    if settled is not None:  # decided by a publish scan; its ledger entry may have retired since
        if settled:
            return Decision.REDUNDANT if settled == "redundant" else Decision.FOREIGN
        return Decision.LOG_ONLY if meta.log_only else Decision.COMMITTED
    retired = state.retired.get(meta.writer_id)
    if retired is not None and retired.contains(meta.batch_id):
        # every committed record of a retired batch is settled (or deleted by retention): this one is
        # another attempt's copy (found by the simulation, e.g. seed 285)
        return Decision.REDUNDANT
    if meta.log_only:
        return Decision.LOG_ONLY
    latest = state.epochs.get(meta.writer_id)
    if latest is None or meta.epoch > latest:
        return Decision.FOREIGN
    if meta.epoch < latest:
        successor_batch = state.max_batch_committed_after(meta.writer_id, meta.epoch)
        if successor_batch is not None and successor_batch >= meta.batch_id:
            return Decision.REDUNDANT
        return Decision.DEAD_PENDING
    return Decision.IN_FLIGHT


#: What identifies a reconciler record whatever wrote it: see :func:`output_identity`.
OutputIdentity = tuple[Any, ...]


def output_identity(meta: RecordMeta, partition: int) -> OutputIdentity | None:
    """The identity of a reconciler record in ``partition``, the same for every copy of it; None for
    data records (and reasserts written before reasserts had one).

    A reversal is identified by the record it reverses (``reverses``); a reassert half by its pair (the
    record whose image it restores and the run that planned it, ``reasserts``) and its half. Copies of one
    record come from a reconcile task retried after a partial flush (Spark resends the partition's
    records), or from two reconcilers that planned the same window (one stalled past its lease): both
    write the same identities. The first copy in log order counts; reversals and reasserts are written
    after the records they name, in the same partition, so any read that sees the original sees the first
    copy before the others.
    """
    if meta.record_type is RecordType.REVERSAL and meta.reverses is not None:
        return (partition, "reversal", *meta.reverses)
    if meta.record_type is RecordType.REASSERT and meta.reasserts is not None:
        return (partition, "reassert", *meta.reasserts, meta.pair_half)
    return None


def opening_half(identity: OutputIdentity) -> OutputIdentity | None:
    """For a reassert pair's closing half, the identity of the pair's opening half (else None)."""
    if identity[1] == "reassert" and identity[-1] == 2:
        return (*identity[:-1], 1)
    return None


class FirstCopies:
    """Which reconciler records of one read are first copies (see :func:`output_identity`).

    Feed every reconciler record the read would return, in log order per partition.

    :param paired: an eventual hybrid read's copies: a closing half counts only after the read counted
        its pair's opening half; one met before it is a late copy of a closing half below the read's
        start, and is dropped (H2: a hybrid read's start never splits a pair, but a reconciler that read
        the log's end between another run's two halves closes that pair again, and its copy can land
        after the watermark passed the whole pair). Counted, it would add a row the snapshot holds
        (retract semantics: +U r twice).
    """

    def __init__(self, paired: bool = False) -> None:
        self._seen: set[OutputIdentity] = set()
        self.paired = paired

    def first(self, meta: RecordMeta, partition: int) -> bool:
        identity = output_identity(meta, partition)
        if identity is None:
            return True
        if identity in self._seen:
            return False
        opening = opening_half(identity) if self.paired else None
        if opening is not None and opening not in self._seen:
            return False  # a copy of a pair closed before the read's start
        self._seen.add(identity)
        return True


def retired_unknown(
    meta: RecordMeta, partition: int, offset: int, state: ControlState, log_start: int
) -> bool:
    """True for a data record :func:`classify` cannot decide any more: its batch's ledger entry retired
    because retention deleted its records (this one too: it is below the partition's ``log_start``), and
    no publish scan settled it. Only a reader that held the record since before it was deleted (a
    follower's buffer) can meet one, and only when it missed the entry itself (compaction removed it
    while the follower lagged behind the control topic): ``classify`` would call it another attempt's
    copy, which holds only for records retention kept. Such a reader must stop, not guess."""
    return (
        meta.record_type is RecordType.DATA
        and offset < log_start
        and (meta.writer_id, meta.batch_id) not in state.commits
        and meta.writer_id in state.retired
        and state.retired[meta.writer_id].contains(meta.batch_id)
        and state.settled_hole(partition, offset) is None
    )


def offset_breaks(state: ControlState, partition: int) -> list[int]:
    """The offsets of ``partition`` at which :func:`classify`'s answer for one header set may change.

    ``classify`` reads a record's offset only through ``CommitInfo.covers`` (a commit's offsets) and
    ``ControlState.settled_hole`` (the settled ranges and their holes). Between two consecutive breaks
    each of those answers is the same for every offset, so a bulk reader may call ``classify`` once per
    (header set, partition, segment between breaks) and give every record there that one decision
    (:meth:`ReadFilter.decide_many`). Whoever makes ``classify`` read the offset in a new way adds its
    breaks here (``tests/unit/core/test_bulk_visibility.py`` compares both paths on random states).
    """
    points: set[int] = set()
    for commit in state.commits.values():
        span = commit.offsets.get(partition)
        if span is not None:
            points.update((span[0], span[1] + 1))
    runs = [*state.settled.get(partition, ())]
    for kind_runs in state.holes.get(partition, {}).values():
        runs.extend(kind_runs)
    for first, last in runs:
        points.update((first, last + 1))
    return sorted(points)


class WatermarkScan:
    """Advances a partition's watermark while records are scanned in offset order.

    The watermark stops before the first undecided record, and before a reconciler's reassert pair
    whose closing half has not been scanned yet: a hybrid read starts right after the watermark, and
    half a pair would leave a row counted twice (retract semantics). Halves are matched by their pair
    (``reasserts``): a closing half closes its pair's open half, and an opening half opens its pair
    unless it is open already. So a retried reconcile task's resent pair closes the pair its first try
    opened; an opening half left alone (a stalled second reconciler that wrote half its copy) holds the
    watermark until the next reconciler closes it: a hybrid read starting after the first copy would
    count that half, which is its first copy there.
    """

    def __init__(self, previous: Mapping[int, int]) -> None:
        self.previous = dict(previous)
        self.blocked: dict[int, int] = {}  # partition -> first undecided offset
        self.decided_up_to: dict[int, int] = {}
        # partition -> [offset, pair] of unclosed opening halves (pair None: written before pairs had one)
        self.open_pairs: dict[int, list[tuple[int, tuple[int, int, int] | None]]] = {}
        self.holes: dict[int, dict[str, list[list[int]]]] = {}  # partition -> kind -> offset runs

    def observe(
        self,
        partition: int,
        offset: int,
        decision: Decision | None,
        pair_half: int = 0,
        pair: tuple[int, int, int] | None = None,
    ) -> None:
        """Record one scanned record; ``decision`` None means undecodable (decided: dead-lettered).

        :param pair_half: the record's ``reassert-half`` header (1 opens a pair, 2 closes one).
        :param pair: the record's ``reasserts`` header: which pair the half belongs to.
        """
        if partition in self.blocked:
            return
        if decision is not None and decision.undecided:
            self.blocked[partition] = offset
            return
        if decision in HOLE_KINDS:
            runs = self.holes.setdefault(partition, {}).setdefault(HOLE_KINDS[decision], [])
            if runs and runs[-1][1] == offset - 1:
                runs[-1][1] = offset
            else:
                runs.append([offset, offset])
        opened = self.open_pairs.setdefault(partition, [])
        if pair_half == 1:
            if pair is None or all(open_pair != pair for _, open_pair in opened):
                opened.append((offset, pair))  # a copy of a half still open opens nothing more
        elif pair_half == 2:
            for index, (_, open_pair) in enumerate(opened):
                if open_pair == pair:
                    del opened[index]
                    break
        self.decided_up_to[partition] = offset

    def finish(self, end_offsets: Mapping[int, int]) -> dict[int, int]:
        """The new watermark: per partition the highest decided offset, never below the previous one.

        :param end_offsets: per partition the offset after the last scanned record.
        """
        result = dict(self.previous)
        for partition, end in end_offsets.items():
            candidate = self.blocked[partition] - 1 if partition in self.blocked else end - 1
            if self.open_pairs.get(partition):
                candidate = min(candidate, self.open_pairs[partition][0][0] - 1)
            result[partition] = max(result.get(partition, -1), candidate)
        return result

    def settled(self, start: Mapping[int, int], watermark: Mapping[int, int]) -> dict[str, Any]:
        """What this scan settled, for the watermark record: per partition the range it classified up
        to the new watermark (``scanned``) and, inside it, the data records that are *not* committed
        (``holes``: redundant or foreign runs). With these a settled record is classified without its
        ledger entry (see :func:`classify`), so entries can retire (``core.checkpoint``)."""
        scanned = {
            str(p): [start[p], watermark[p]] for p in start if p in watermark and watermark[p] >= start[p]
        }
        holes = {}
        for partition, kinds in self.holes.items():
            if str(partition) not in scanned:
                continue
            clipped = {kind: ranges.clip(runs, watermark[partition]) for kind, runs in kinds.items()}
            clipped = {kind: runs for kind, runs in clipped.items() if runs}
            if clipped:
                holes[str(partition)] = clipped
        return {"scanned": scanned, "holes": holes}


#: Decisions a settled record keeps without its ledger entry, by the name of its hole kind.
HOLE_KINDS = {Decision.REDUNDANT: "redundant", Decision.FOREIGN: "foreign"}


def watermark_scan_range(
    watermark: Mapping[int, int], bounds: Mapping[int, tuple[int, int]]
) -> tuple[dict[int, int], dict[int, int]]:
    """(start, end) of a publish scan: from after the watermark (or the log start) to the log's ends.

    :param bounds: per partition (log start offset, end offset), read before the control state.
    """
    start = {p: max(watermark.get(p, -1) + 1, low) for p, (low, _) in bounds.items()}
    end = {p: high for p, (_, high) in bounds.items()}
    return start, end


@dataclass(frozen=True)
class WatermarkMove:
    """What a publish scan decided: the new watermark, what it settled, and in numbers why."""

    watermark: dict[int, int]
    settled: dict[str, Any]  # see WatermarkScan.settled
    scanned: int = 0
    undecodable: int = 0
    blocked_by: dict[str, dict[str, Any]] = field(default_factory=dict)  # partition -> first undecided


def scan_watermark(
    records: Iterable[tuple[int, int, Any]],
    state: ControlState,
    start: Mapping[int, int],
    end: Mapping[int, int],
) -> WatermarkMove:
    """Classify ``records`` ((partition, offset, headers) in offset order, ``start`` to ``end``) against
    ``state`` and move its watermark to the first undecided record of each partition."""
    scan = WatermarkScan(state.watermark)
    scanned = undecodable = 0
    blocked_by: dict[str, dict[str, Any]] = {}
    for partition, offset, headers in records:
        scanned += 1
        if partition in scan.blocked:
            continue
        try:
            meta = decode_headers(headers)
        except RecordDecodeError:
            undecodable += 1
            scan.observe(partition, offset, None)  # decided: dead-lettered
            continue
        decision = classify(meta, partition, offset, state)
        if decision.undecided:
            blocked_by[str(partition)] = _blocker(meta, offset, decision)
        scan.observe(partition, offset, decision, meta.pair_half, meta.reasserts)
    watermark = scan.finish(end)
    return WatermarkMove(watermark, scan.settled(start, watermark), scanned, undecodable, blocked_by)


def _blocker(meta: RecordMeta, offset: int, decision: Decision) -> dict[str, Any]:
    return {
        "offset": offset,
        "writer_id": meta.writer_id,
        "batch_id": meta.batch_id,
        "epoch": meta.epoch,
        "state": decision.value,
    }


def newly_visible_commits(
    state: ControlState, before: Mapping[int, int], after: Mapping[int, int]
) -> list[str]:
    """Commits ("writer/batch/epoch") whose records became visible between two watermarks.

    A commit is visible when every partition it wrote to is at or below the watermark (as in
    ``publish.is_visible``); it is reported once, by the move that completes it.
    """

    def visible(commit: CommitInfo, watermark: Mapping[int, int]) -> bool:
        return all(watermark.get(p, -1) >= last for p, (_, last) in commit.offsets.items())

    found = [
        f"{commit.writer_id}/{commit.batch_id}/{commit.epoch}"
        for commit in state.commits.values()
        if commit.offsets and visible(commit, after) and not visible(commit, before)
    ]
    return sorted(found)


def visible_end(end: Mapping[int, int], watermark: Mapping[int, int]) -> dict[int, int]:
    """Where a consistent read of each partition stops: at ``end`` (exclusive), or just past the
    watermark when that is lower (a partition without a watermark shows nothing yet)."""
    return {p: min(end[p], watermark.get(p, -1) + 1) for p in end}


def recorded_positions(commits: Iterable[CommitInfo]) -> dict[int, int]:
    """Per partition the highest ``logstore.log-positions`` any of ``commits`` recorded."""
    positions: dict[int, int] = {}
    for commit in commits:
        for partition, position in commit.positions.items():
            positions[partition] = max(positions.get(partition, 0), position)
    return positions


def commit_positions(previous: Mapping[int, int], watermark: Mapping[int, int]) -> dict[int, int]:
    """Where a hybrid read of a new snapshot starts each partition's log (``logstore.log-positions``).

    Below the visibility watermark every record is decided, and every committed one belongs to a commit
    that reached ``main`` before the snapshot's base: the snapshot's data holds it. Above it, records
    of other writers may still commit later, so the log must be read from there. The position is the
    watermark + 1 read *before* the commit's base (never the batch's own last offset + 1: that would
    jump over another writer's undecided records in the same partition).
    """
    positions = {p: o for p, o in previous.items()}
    for partition, offset in watermark.items():
        positions[partition] = max(positions.get(partition, 0), offset + 1)
    return positions


def included_commits(
    commits: Iterable[CommitInfo], positions: Mapping[int, int], own: CommitInfo
) -> frozenset[str]:
    """The commits a new snapshot holds that have records at or above its positions ("writer/batch").

    A hybrid read of the snapshot skips exactly these in its log part (``logstore.log-included``):
    everything committed below the positions is in the snapshot's rows anyway, and everything above
    them not listed here committed after it. Usually the snapshot's own batch and the few committed
    since the last publish.
    """

    def above(commit: CommitInfo) -> bool:
        return any(last >= positions.get(p, 0) for p, (_, last) in commit.offsets.items())

    return frozenset(f"{c.writer_id}/{c.batch_id}" for c in [*commits, own] if above(c))


def with_positions(commit: CommitInfo, state: ControlState) -> CommitInfo:
    """``commit`` with the positions and included commits of a snapshot built on ``state``'s base."""
    positions = commit_positions(recorded_positions(state.commits.values()), state.watermark)
    return replace(
        commit, positions=positions, included=included_commits(state.commits.values(), positions, commit)
    )


def in_snapshot(commit: CommitInfo | None, snapshot_sequence: int | None) -> bool:
    """True when ``commit``'s data is part of the snapshot with sequence number ``snapshot_sequence``.

    ``main`` only moves by compare-and-set, so its history is a line and a commit is in a snapshot
    exactly when its own sequence number is not larger.
    """
    return (
        commit is not None
        and commit.sequence_number is not None
        and snapshot_sequence is not None
        and commit.sequence_number <= snapshot_sequence
    )


def hybrid_keeps(
    meta: RecordMeta,
    partition: int,
    offset: int,
    decision: Decision,
    state: ControlState,
    snapshot_sequence: int | None,
    start: Mapping[int, int],
    consistent: bool,
    snapshot_included: frozenset[str] | None = None,
) -> bool:
    """Does a hybrid read (a snapshot's rows, then the log from ``start``) return this log record?

    The log part returns the changes the snapshot does not hold: never a committed record of a commit
    the snapshot holds (it is in the rows). A consistent read returns the other committed records; an
    eventual one also what may still commit (in flight, dead pending), log-only records and reasserts,
    but nothing known never to be a table change: redundant and foreign records, and reversals (which
    only ever undo redundant records). So a hybrid read is the table at the snapshot plus its later
    changes whether or not reconciliation has run.
    """
    if offset < start.get(partition, 0):
        return False
    if decision is Decision.COMMITTED:
        return not _held(meta, state, snapshot_sequence, snapshot_included)
    return not consistent and decision not in NEVER_A_TABLE_CHANGE


#: Records an eventual hybrid read leaves out: decided, and never part of the table.
NEVER_A_TABLE_CHANGE = frozenset({Decision.REDUNDANT, Decision.FOREIGN, Decision.REVERSAL})


def _held(
    meta: RecordMeta, state: ControlState, sequence: int | None, included: frozenset[str] | None
) -> bool:
    """Does the snapshot hold this committed record's batch? Its ``log-included`` list says so; a
    snapshot written before that list existed is asked by sequence number."""
    if included is not None:
        return f"{meta.writer_id}/{meta.batch_id}" in included
    return in_snapshot(state.commits.get((meta.writer_id, meta.batch_id)), sequence)


@dataclass(frozen=True)
class ReadFilter:
    """Which log records a read returns: one rule for every reader (Python, Spark, follower).

    :param state: the control state (None: an eventual log read, which returns every record).
    :param consistent: return committed records only.
    :param snapshot_sequence: for a hybrid read, the sequence number of the snapshot whose rows it
        returns; ``start`` is where its log part starts (see :func:`hybrid_keeps`).

    A filter belongs to one read: it remembers the reconciler records it let through, and a later copy
    of one of them is a ``DUPLICATE`` (:func:`output_identity`). Feed it records in log order per
    partition.
    """

    state: ControlState | None
    consistent: bool
    snapshot_sequence: int | None = None
    start: Mapping[int, int] | None = None
    snapshot_included: frozenset[str] | None = None
    # per partition the offset breaks of ``state`` (the state must not change while the filter is used)
    _breaks: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)
    _copies: FirstCopies = field(default_factory=FirstCopies, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.start is not None and not self.consistent:  # an eventual hybrid read: pairs (H2)
            object.__setattr__(self, "_copies", FirstCopies(paired=True))

    @property
    def pairs_halves(self) -> bool:
        """Does this read drop the closing halves it meets before their pair's opening half (an eventual
        hybrid read, :class:`FirstCopies`)?"""
        return self._copies.paired

    def decide(self, meta: RecordMeta, partition: int, offset: int) -> tuple[bool, Decision | None]:
        """(keep the record?, its decision, or None when no state was needed); a second copy of a
        reconciler record the read returned already is dropped as ``DUPLICATE``."""
        keep, decision = self.rule(meta, partition, offset)
        if keep and meta.record_type is not RecordType.DATA and not self._copies.first(meta, partition):
            return False, Decision.DUPLICATE
        return keep, decision

    def rule(self, meta: RecordMeta, partition: int, offset: int) -> tuple[bool, Decision | None]:
        """What :meth:`decide` answers before it looks for copies: the same for every record of one
        header set between two :meth:`breaks`."""
        if self.state is None:
            return True, None
        decision = classify(meta, partition, offset, self.state)
        if self.start is not None:
            keep = hybrid_keeps(
                meta,
                partition,
                offset,
                decision,
                self.state,
                self.snapshot_sequence,
                self.start,
                self.consistent,
                self.snapshot_included,
            )
            return keep, decision
        return (decision is Decision.COMMITTED or not self.consistent), decision

    def breaks(self, partition: int) -> np.ndarray:
        """Where in ``partition`` this filter's answer may change (see :func:`offset_breaks`); a hybrid
        read's log start is one more."""
        import numpy as np

        found = self._breaks.get(partition)
        if found is None:
            points = offset_breaks(self.state, partition) if self.state is not None else []
            if self.start is not None:
                points = sorted({*points, int(self.start.get(partition, 0))})
            found = self._breaks[partition] = np.asarray(points, dtype=np.int64)
        return found

    def decide_many(
        self, metas: Sequence[RecordMeta], codes: np.ndarray, partitions: np.ndarray, offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[Decision | None]]:
        """:meth:`decide` for many records at once, calling it once per (header set, partition, segment
        between :meth:`breaks`): the same answers, record by record.

        :param metas: the distinct decoded header sets; ``codes[i]`` is record i's index into them.
        :returns: (keep mask, per record an index into the decisions list, the decisions).
        """
        import numpy as np

        count = len(codes)
        if self.state is None:
            everything: list[Decision | None] = [None]
            keep_all, first_group = np.ones(count, dtype=bool), np.zeros(count, dtype=np.int64)
            return self._drop_copies(metas, codes, partitions, keep_all, first_group, everything)
        segments = np.zeros(count, dtype=np.int64)
        for partition in np.unique(partitions):
            where = partitions == partition
            segments[where] = np.searchsorted(self.breaks(int(partition)), offsets[where], side="right")
        # one integer per (header set, partition, segment)
        width_segment = int(segments.max(initial=0)) + 1
        width_partition = int(partitions.max(initial=0)) + 1
        groups = (codes.astype(np.int64) * width_partition + partitions) * width_segment + segments
        _, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
        keep_of = np.zeros(len(first), dtype=bool)
        decision_of: list[Decision | None] = []
        for group, index in enumerate(first):
            kept, decision = self.rule(metas[codes[index]], int(partitions[index]), int(offsets[index]))
            keep_of[group] = kept
            decision_of.append(decision)
        inverse = inverse.reshape(-1)
        return self._drop_copies(metas, codes, partitions, keep_of[inverse], inverse, decision_of)

    def _drop_copies(
        self,
        metas: Sequence[RecordMeta],
        codes: np.ndarray,
        partitions: np.ndarray,
        keep: np.ndarray,
        inverse: np.ndarray,
        decisions: list[Decision | None],
    ) -> tuple[np.ndarray, np.ndarray, list[Decision | None]]:
        """Drop the kept reconciler records that are copies (:meth:`decide`); few records are
        reconciler records, and only they are looked at one by one."""
        import numpy as np

        outputs = [
            code
            for code, meta in enumerate(metas)
            if meta is not None and meta.record_type is not RecordType.DATA
        ]
        if not outputs:
            return keep, inverse, decisions
        duplicate = len(decisions)
        for index in np.flatnonzero(keep & np.isin(codes, outputs)).tolist():
            if not self._copies.first(metas[codes[index]], int(partitions[index])):
                keep[index] = False
                inverse[index] = duplicate
        if duplicate in inverse:
            decisions = [*decisions, Decision.DUPLICATE]
        return keep, inverse, decisions
