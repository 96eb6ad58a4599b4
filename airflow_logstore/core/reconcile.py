"""Failover reconciliation, the pure part: which log records to reverse and what to write (no I/O).

The reconciler scans each partition of the log from its last reconciled position up to a safe point
(the end offsets captured when the run started) and classifies every record against the control state
(:func:`airflow_logstore.core.visibility.classify`):

- ``REDUNDANT`` records (a failed attempt's copy of a batch, a dead epoch's batch) are reversed, unless
  a ``reversal`` record in the window already names them in its ``reverses`` header (a re-run after a
  crash reverses nothing twice: reversals are appended after their originals, in the same partition);
- ``IN_FLIGHT`` and ``DEAD_PENDING`` records are left alone ("skipped in flight"); their attempts are
  kept in the progress record as *pending* (per partition: the attempt and the offsets of its records)
  and the position moves on to the safe point. The next run decides each pending attempt again from
  the control state: still undecided, it stays pending; committed, it is dropped; otherwise (its
  batch committed by another attempt: redundant) that run starts its partition's scan at the attempt's
  first record, once (:func:`window_starts`). So a record in flight costs a rescan only when its
  attempt turns out redundant, not on every run while it waits;
- records whose headers do not decode, and redundant records whose value does not decode, are
  dead-lettered and counted; everything else is only counted.

**Reversals.** A reversal has the original's key and row with the reversed kind (+I→-D, +U→-U, -U→+U,
-D→+I), record-type ``reversal`` and ``reverses=<partition>:<offset>``, and goes to the original's
partition. Per key, reversals are written in *reverse* log order. Under retract semantics a reversal
cancels exactly its original, whatever comes between them.

**Reasserts.** Under upsert semantics (last record per key wins) the last reversal of a key sets the
key to the image *before* its first redundant record, which would undo a later legitimate change of
that key. So, after a key's reversals, the planner appends a *reassert* pair that is neutral under
retract semantics and restores the key's last legitimate image X (the last committed, in-flight or
log-only data record of the key) under upsert semantics: ``[-U r, +U r]`` when X adds row r (+I/+U),
``[+I r, -D r]`` when X retracts row r (-U/-D). It is written when X exists, is not itself the key's
last record, and either

- X comes after the key's first redundant record in the window (the decided rule), unless the key's
  last record is already a reassert (a re-run after a crash writes it once), or
- the image the key would end with (its last reversal, or its last record) differs from X's image
  (covers a redundant record written after a legitimate change it did not know of, and a previous
  run's reversal that landed after writes made while that run scanned: see *lookback*).

**Lookback.** Writers keep writing while the reconciler scans; a legitimate change produced after the
previous run's safe point but before that run's reversals is shadowed by them under upsert semantics.
The progress record keeps the previous run's safe point and the last offsets of its output; between
the two, the planner remembers the last legitimate record of every key (a range as small as the
writes made during one run) so that a shadowed change gets its reassert now.

Applying the whole log in order — originals, reversals and reasserts — then gives, per key, exactly
the table's state, under both :func:`~airflow_logstore.core.changelog.apply_retract` and
:func:`~airflow_logstore.core.changelog.apply_upsert`.

Memory: per-record state only for redundant records (their value, to reverse them) and per-key state
only for keys that have redundant (or previously reconciled) records in the window; every other
record is classified from its headers (memoized per distinct header set) and forgotten.

Limits: keys of tables without a primary key (null Kafka key) get reversals only — append-only
tables are read with retract semantics. A redundant record produced after legitimate changes of its
key that are *older than the window* (a zombie writer that outlived its successor's next
reconciliation) is reversed exactly (retract) but its upsert image is restored only when a
legitimate record of the key is in the window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_logstore.core.codec import (
    RECONCILER_WRITER_ID,
    RecordMeta,
    RecordType,
    RowKind,
    decode_headers,
    decode_value,
    encode_headers,
    kind_of,
    row_identity,
    with_kind,
)
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.lease import RECONCILER_LEASE
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.core.visibility import Decision, FirstCopies, classify
from airflow_logstore.exceptions import RecordDecodeError

LEASE_NAME = RECONCILER_LEASE
#: the stages of a run, where a test can stop it (a stage hook) or kill it (``LOGSTORE_KILL_AT`` of
#: ``reconcile:<stage>``): after the lease, after planning, after the lease check before producing, after
#: the reversals are flushed (before the progress record), right before the progress record
STAGES = ("lease-acquired", "planned", "lease-checked", "output-flushed", "before-progress")

#: decisions of data records that count as the key's legitimate history (the table's state to keep)
LEGIT = frozenset({Decision.COMMITTED, Decision.IN_FLIGHT, Decision.LOG_ONLY})
RECONCILER_OUTPUT = frozenset({Decision.REVERSAL, Decision.REASSERT})
_COMMITTED = Decision.COMMITTED


# --- values --------------------------------------------------------------------------------------------


def upsert_image(kind: RowKind, row: Mapping[str, Any]) -> tuple[tuple[str, Any], ...] | None:
    """What upsert semantics leave for a key after this record: its row, or nothing (a retraction).

    The row as its exact identity (:func:`~airflow_logstore.core.codec.row_identity` of the decoded
    row, whose numbers are exact decimals): two images are equal only when every value is the same, so
    a key left with another value, however close, gets its reassert.
    """
    return row_identity(row) if kind.is_addition else None


def reversal_value(value: bytes | None) -> bytes:
    return with_kind(value, kind_of(value).reversed())


def reassert_values(value: bytes | None) -> tuple[tuple[RowKind, bytes], tuple[RowKind, bytes]]:
    """The reassert pair restoring the image of ``value``: [-U r, +U r] or [+I r, -D r]."""
    if kind_of(value).is_addition:
        return (
            (RowKind.UPDATE_BEFORE, with_kind(value, RowKind.UPDATE_BEFORE)),
            (RowKind.UPDATE_AFTER, with_kind(value, RowKind.UPDATE_AFTER)),
        )
    return (
        (RowKind.INSERT, with_kind(value, RowKind.INSERT)),
        (RowKind.DELETE, with_kind(value, RowKind.DELETE)),
    )


# --- classification ------------------------------------------------------------------------------------


_Entry = tuple[RecordMeta, "tuple[int, int] | None", "Decision | None", "Decision | None"]


class Classifier:
    """:func:`classify` with a cache per (record meta, partition): the reconciler's one classification.

    ``classify`` depends on the offset only through ``CommitInfo.covers`` — whether the offset lies in
    the commit's span for that partition — so per (meta, partition) two answers suffice: inside and
    outside the span. Without a ledger entry it may also depend on the settled ranges of the partition
    (a retired entry, ``ControlState.settled_hole``): such an entry holds no decision and each record
    is classified on its own (found by the simulation: a cached answer reversed committed records).
    Decoded headers are memoized by the codec (identical headers give the same object), so the cache
    is keyed by object identity and keeps a reference to the meta it describes.
    """

    MAX_ENTRIES = 1024  # recent attempts; rebuilt cheaply (bounded memory on long scans)

    def __init__(self, state: ControlState) -> None:
        self.state = state
        self._cache: dict[tuple[int, int], _Entry] = {}

    def __call__(self, meta: RecordMeta, partition: int, offset: int) -> Decision:
        return self.decide(self.entry(meta, partition), partition, offset)

    def decide(self, entry: _Entry, partition: int, offset: int) -> Decision:
        """The decision for the record at ``offset`` that ``entry`` describes."""
        span, inside, outside = entry[1], entry[2], entry[3]
        if inside is None or outside is None:
            return classify(entry[0], partition, offset, self.state)
        return inside if span is not None and span[0] <= offset <= span[1] else outside

    def committed_offsets(self, meta: RecordMeta, partition: int) -> tuple[int, int] | None:
        """The offsets at which :meth:`decide` answers ``COMMITTED`` for ``meta``'s records: its
        commit's span, or None (none are, or each offset is decided on its own: decide those one by
        one). Outside a commit's span no record is committed. For scans that pick out the committed
        records of a whole batch at once."""
        _, span, inside, _ = self.entry(meta, partition)
        return span if inside is _COMMITTED else None

    def entry(self, meta: RecordMeta, partition: int) -> _Entry:
        """(meta, commit span or None, decision inside the span, decision outside it)."""
        entry = self._cache.get((id(meta), partition))
        if entry is None or entry[0] is not meta:
            entry = self._entry(meta, partition)
        return entry

    def _entry(self, meta: RecordMeta, partition: int) -> _Entry:
        outside = classify(meta, partition, -1, self.state)
        if meta.record_type is not RecordType.DATA:  # one record each: classify, do not cache
            return (meta, None, outside, outside)
        commit = self.state.commits.get((meta.writer_id, meta.batch_id))
        if commit is None and self.state.settled.get(partition):
            return (meta, None, None, None)  # per offset: settled ranges decide
        span = commit.offsets.get(partition) if commit is not None else None
        inside = classify(meta, partition, span[0], self.state) if span is not None else outside
        entry = (meta, span, inside, outside)
        if len(self._cache) >= self.MAX_ENTRIES:
            self._cache.clear()
        self._cache[(id(meta), partition)] = entry
        return entry


def own_record_decision(commit: CommitInfo, partition: int, state: ControlState) -> Decision:
    """What :func:`classify` decides for a record ``commit`` itself wrote in ``partition``, inside its
    span: ``COMMITTED``, or ``LOG_ONLY`` for a log-only batch."""
    meta = RecordMeta(
        commit.writer_id,
        commit.epoch,
        commit.batch_id,
        min(commit.tasks) if commit.tasks else "",
        log_only=commit.log_only,
    )
    return classify(meta, partition, commit.offsets[partition][0], state)


def dense_spans(state: ControlState, partition: int) -> list[tuple[int, int, Decision]]:
    """Offset ranges of ``partition`` whose every record is known without reading its headers.

    A commit records, per partition, the first and last offset of its records, and how many records
    it wrote in all. When the spans' sizes add up to exactly that count, no other record (a failed
    task attempt's, another writer's, a reversal, a foreign one) can lie inside them: every record in
    them is one of the commit's, decided as :func:`own_record_decision` says (``COMMITTED``, or
    ``LOG_ONLY`` for a log-only batch). The scan skips decoding headers there, which is most of the
    cost per record. Sorted, non-overlapping.
    """
    spans = []
    for commit in state.commits.values():
        span = commit.offsets.get(partition)
        if span is None or commit.record_count <= 0:
            continue
        if sum(last - first + 1 for first, last in commit.offsets.values()) != commit.record_count:
            continue  # something else is interleaved (or the count is unknown): decide per record
        decision = own_record_decision(commit, partition, state)
        if decision in _DENSE:
            spans.append((span[0], span[1], decision))
    spans.sort()
    result: list[tuple[int, int, Decision]] = []
    for dense in spans:
        if result and dense[0] <= result[-1][1]:
            continue  # overlapping spans cannot both be dense; keep the first, decide the rest per record
        result.append(dense)
    return result


_DENSE = frozenset({Decision.COMMITTED, Decision.LOG_ONLY})


# --- positions and gaps ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gap:
    """Records of a partition deleted (by retention) before reconciliation scanned them."""

    partition: int
    from_offset: int
    to_offset: int
    detected: str = "log-start"  # "log-start": found before the scan; "scan": deleted while scanning

    @property
    def count(self) -> int:
        return self.to_offset - self.from_offset

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "from": self.from_offset,
            "to": self.to_offset,
            "count": self.count,
            "detected": self.detected,
        }


def start_positions(
    saved: Mapping[int, int], bounds: Mapping[int, tuple[int, int]]
) -> tuple[dict[int, int], list[Gap], list[str]]:
    """Where each partition's scan starts, the retention gaps, and warnings.

    :param saved: per partition the next offset to scan, from the last progress record (0 if none).
    :param bounds: per partition (log start offset, end offset) now.
    A saved position below the log start is a gap: the scan goes on from the log start. A saved
    position beyond the log end (a recreated topic) starts again from the log start, with a warning;
    the ``reverses`` headers keep that from reversing anything twice.
    """
    starts: dict[int, int] = {}
    gaps: list[Gap] = []
    warnings: list[str] = []
    for partition, (low, high) in sorted(bounds.items()):
        position = int(saved.get(partition, 0))
        if position > high:
            warnings.append(
                f"partition {partition}: reconciled position {position} is beyond the log end {high} "
                f"(was the topic recreated?); scanning again from the log start {low}"
            )
            position = low
        if position < low:
            gaps.append(Gap(partition, position, low))
            position = low
        starts[partition] = position
    return starts, gaps, warnings


def window_starts(
    state: ControlState, bounds: Mapping[int, tuple[int, int]]
) -> tuple[dict[int, int], list[Gap], list[str], dict[int, list[list[Any]]]]:
    """Where each partition's scan starts, the retention gaps, warnings, and the pending attempts
    carried over (not scanned again).

    The start is the reconciled position, or the first record of a pending attempt of the last
    progress record that is no longer undecided and not wholly committed (its batch was committed by
    another attempt: its records are redundant), if earlier. Pending attempts still undecided and
    before the start are carried into the next progress record; the scan sees the others again.
    """
    saved = dict(state.reconcile_positions)
    pending = _pending_of(state.reconcile_progress)
    for partition, attempt in pending:
        if _rescan(attempt, partition, state):
            saved[partition] = min(int(saved.get(partition, 0)), attempt[5])
    starts, gaps, warnings = start_positions(saved, bounds)
    carried: dict[int, list[list[Any]]] = {}
    for partition, attempt in pending:
        undecided = classify(_attempt_meta(attempt), partition, attempt[5], state).undecided
        if undecided and partition in starts and attempt[5] < starts[partition]:
            carried.setdefault(partition, []).append(attempt)
    return starts, gaps, warnings, carried


def _pending_of(progress: Mapping[str, Any] | None) -> list[tuple[int, list[Any]]]:
    return [
        (int(partition), list(attempt))
        for partition, attempts in ((progress or {}).get("pending") or {}).items()
        for attempt in attempts
    ]


def _attempt_meta(attempt: Sequence[Any]) -> RecordMeta:
    writer, epoch, batch, task, log_only = attempt[:5]
    return RecordMeta(str(writer), int(epoch), int(batch), str(task), log_only=bool(log_only))


def _rescan(attempt: Sequence[Any], partition: int, state: ControlState) -> bool:
    """Whether a pending attempt's records must be scanned again: decided now, and not all committed."""
    meta = _attempt_meta(attempt)
    first, last = classify(meta, partition, attempt[5], state), classify(meta, partition, attempt[6], state)
    if first.undecided and last.undecided:
        return False
    return not (first in _DENSE and last in _DENSE)


def pending_attempts(
    carried: Mapping[int, Sequence[Sequence[Any]]], stats: Iterable[PartitionStats]
) -> dict[str, list[list[Any]]]:
    """The ``pending`` of the progress record: the attempts carried over and those the run saw."""
    result: dict[str, list[list[Any]]] = {}
    for partition, attempts in carried.items():
        result.setdefault(str(partition), []).extend(list(a) for a in attempts)
    for s in stats:
        if s.pending:
            result.setdefault(str(s.partition), []).extend(list(a) for a in s.pending)
    return dict(sorted(result.items()))


def lookback_ranges(
    progress: Mapping[str, Any] | None, starts: Mapping[int, int]
) -> dict[int, tuple[int, int]]:
    """Per partition [previous safe point, last offset of the previous run's output], within the window."""
    if not progress:
        return {}
    safe_point = {int(p): int(o) for p, o in (progress.get("safe_point") or {}).items()}
    ranges = {}
    for partition, span in (progress.get("output") or {}).items():
        p = int(partition)
        last = int(span[1])
        first = max(safe_point.get(p, 0), starts.get(p, 0))
        if p in starts and last >= first:
            ranges[p] = (first, last)
    return ranges


# --- planning one partition --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Output:
    """A record the reconciler writes: a reversal, or one half of a reassert pair."""

    partition: int
    key: bytes | None
    value: bytes
    record_type: RecordType
    source: int  # offset of the record reversed or of the image reasserted (-1: completes a cut pair)
    reverses: tuple[int, int] | None = None
    pair_half: int = 0  # reasserts: 1 opens the pair, 2 closes it (the watermark never splits a pair)
    #: reasserts: the pair's identity (partition, source, run) when another run planned the pair (the
    #: closing half of a pair a crash or a copy left open); None: the pair of the run writing it
    pair: tuple[int, int, int] | None = None

    def headers(self, lease_id: int, run: int) -> list[tuple[str, bytes]]:
        return encode_headers(
            RecordMeta(
                RECONCILER_WRITER_ID,
                lease_id,
                run,
                record_type=self.record_type,
                reverses=self.reverses,
                pair_half=self.pair_half,
                reasserts=self.pair_of(run),
            )
        )

    def pair_of(self, run: int) -> tuple[int, int, int] | None:
        """The ``reasserts`` identity this record carries when written by ``run``."""
        if self.record_type is not RecordType.REASSERT:
            return None
        if self.pair is not None:
            return self.pair
        return (self.partition, self.source, run) if self.source >= 0 else None


@dataclass
class PartitionStats:
    partition: int
    start: int
    end: int
    scanned: int = 0
    first_offset: int | None = None  # first offset seen (retention may have deleted the ones before)
    by_decision: dict[str, int] = field(default_factory=dict)
    redundant: int = 0
    redundant_by_attempt: dict[str, int] = field(default_factory=dict)
    reversed: int = 0
    already_reversed: int = 0
    reasserted: int = 0  # reassert pairs
    reassert_skipped: int = 0  # the image to reassert did not decode
    reasserts_completed: int = 0  # second halves written for pairs a crash cut in two
    skipped_in_flight: int = 0
    first_in_flight: dict[str, Any] | None = None
    #: undecided attempts seen: [writer, epoch, batch, task, log_only, first offset, last offset]
    pending: list[list[Any]] = field(default_factory=list)
    dead_lettered: int = 0
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    foreign: int = 0
    copies_seen: int = 0  # second copies of reconciler records (a retried task, a second reconciler)
    next_position: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartitionStats:
        return cls(**dict(data))


@dataclass
class PartitionPlan:
    """A partition's statistics and what to write, kept compact: the records are built when produced.

    ``actions`` reference the scanned values (no copies): ``("reversal", key, offset, value)``,
    ``("reassert", key, offset, value)`` (a pair restoring that record's image) and
    ``("complete", key, -1, first_half)`` (the missing half of a pair a crash cut in two).
    """

    partition: int
    stats: PartitionStats
    actions: list[tuple[str, bytes | None, int, bytes]]
    #: per "complete" action, in order, the pair of the half it closes (None: a pair without identity)
    completes: list[tuple[int, int, int] | None] = field(default_factory=list)

    @property
    def output_count(self) -> int:
        return sum(2 if action[0] == "reassert" else 1 for action in self.actions)

    def iter_outputs(self) -> Iterator[Output]:
        """The records to write, in order, built one at a time."""
        partition = self.partition
        completes = iter(self.completes)
        for action, key, offset, value in self.actions:
            if action == "reversal":
                yield Output(
                    partition, key, reversal_value(value), RecordType.REVERSAL, offset, (partition, offset)
                )
            elif action == "reassert":
                for number, (_, half) in enumerate(reassert_values(value), start=1):
                    yield Output(partition, key, half, RecordType.REASSERT, offset, pair_half=number)
            else:
                second = with_kind(value, _FIRST_HALF[kind_of(value)])
                pair = next(completes, None)
                yield Output(partition, key, second, RecordType.REASSERT, -1, pair_half=2, pair=pair)

    @property
    def outputs(self) -> list[Output]:
        return list(self.iter_outputs())


class _Tail:
    """The last record of a tracked key (for the upsert image it leaves)."""

    __slots__ = ("offset", "record_type", "value")

    def __init__(self, offset: int, record_type: RecordType, value: bytes | None) -> None:
        self.offset = offset
        self.record_type = record_type
        self.value = value


#: An opening half of a reassert pair not closed yet: its value and its pair (None: written before pairs
#: had an identity; matched by row then)
_OpenHalf = tuple[bytes, "tuple[int, int, int] | None"]


class _KeyState:
    __slots__ = ("first_redundant", "legit", "open_halves", "redundant", "tail")

    def __init__(self) -> None:
        self.first_redundant: int | None = None
        self.open_halves: list[_OpenHalf] | None = None  # opening halves not closed (a crash, a copy)
        self.redundant: list[tuple[int, bytes]] = []
        self.legit: tuple[int, bytes | None] | None = None  # the last legitimate record: offset, value
        self.tail: _Tail | None = None


_FIRST_HALF = {RowKind.UPDATE_BEFORE: RowKind.UPDATE_AFTER, RowKind.INSERT: RowKind.DELETE}


def _pair_up(state: _KeyState, value: bytes | None, pair: tuple[int, int, int] | None) -> None:
    """Match reassert halves: a producer that dies mid-run delivers a prefix, maybe half a pair, and a
    copy of a pair (a retried task, a second reconciler) may be cut too. A closing half closes the open
    half of its own pair (``reasserts``), and an opening half opens its pair unless it is open already
    (as :class:`~airflow_logstore.core.visibility.WatermarkScan` counts them); halves written before
    pairs had an identity are matched by row."""
    try:
        kind, row = decode_value(value)
    except RecordDecodeError:
        return
    assert value is not None
    if kind in _FIRST_HALF:
        if pair is None or all(open_pair != pair for _, open_pair in state.open_halves or []):
            state.open_halves = [*(state.open_halves or []), (value, pair)]
        return  # a copy of a half still open (a retried task resent it) opens nothing more
    for index, (half, half_pair) in enumerate(state.open_halves or []):
        if half_pair != pair:
            continue
        first, first_row = decode_value(half)
        if pair is not None or (_FIRST_HALF[first] is kind and row_identity(first_row) == row_identity(row)):
            del state.open_halves[index]  # type: ignore[union-attr]
            return


def _image(value: bytes | None) -> tuple[bool, tuple[tuple[str, Any], ...] | None]:
    kind, row = decode_value(value)
    return (True, upsert_image(kind, row))


class PartitionPlanner:
    """Plans the reconciliation of one partition from its records in offset order.

    Feed every record of [start, end) with :meth:`observe` (or :meth:`observe_undecodable`), then call
    :meth:`finish`. ``observe`` returns a dead-letter reason for a record that must be dead-lettered.
    With ``dense`` spans, try :meth:`known` first: it skips the headers of records known to be committed.
    """

    def __init__(
        self,
        partition: int,
        start: int,
        end: int,
        classifier: Classifier,
        lookback: tuple[int, int] | None = None,
        dense: list[tuple[int, int, Decision]] | None = None,
    ) -> None:
        self.partition = partition
        self.classify = classifier
        self._dense = [span for span in dense or [] if span[1] >= start and span[0] < end]
        self._dense_at = 0
        self.stats = PartitionStats(partition, start, end, next_position=end)
        self.lookback = lookback
        self._keys: dict[bytes, _KeyState] = {}
        self._keyless: list[tuple[int, bytes]] = []
        self._reversed: set[int] = set()
        self._recent: dict[bytes, tuple[int, bytes | None]] = {}  # lookback: last legit record per key
        self._blocked = False
        self._pending: dict[tuple[str, int, int, str, bool], list[int]] = {}
        self._seen = 0
        self._committed = 0
        self._first: int | None = None
        self._last_headers: Any = None
        self._copies = FirstCopies()  # reconciler records seen: a later copy changes nothing
        self._completes: list[tuple[int, int, int] | None] = []
        self._last_entry: _Entry = (None, None, Decision.FOREIGN, Decision.FOREIGN)  # type: ignore[assignment]

    # -- feeding ---------------------------------------------------------------------------------------

    def known(self, offset: int, key: bytes | None, value: bytes | None) -> bool:
        """Feed a record without its headers when it lies in a dense commit span (:func:`dense_spans`);
        False when its headers are needed (then call :meth:`observe`). Offsets must increase."""
        if self.dense_end(offset) is None:
            return False
        self._seen += 1
        if self._first is None:
            self._first = offset
        decision = self._dense[self._dense_at][2]
        if decision is _COMMITTED:
            self._committed += 1
        else:
            counts = self.stats.by_decision
            counts[decision.value] = counts.get(decision.value, 0) + 1
        if key is not None and (self._keys or self.lookback is not None):
            self._legit(offset, key, value)
        return True

    def dense_end(self, offset: int) -> int | None:
        """The last offset of the dense commit span holding ``offset``, or None (its headers are
        needed). Offsets must not decrease between calls (as for :meth:`known`)."""
        dense = self._dense
        at = self._dense_at
        while at < len(dense) and dense[at][1] < offset:
            at += 1
        self._dense_at = at
        if at == len(dense) or dense[at][0] > offset:
            return None
        return dense[at][1]

    def known_many(
        self,
        first: int,
        count: int,
        records: Callable[[], Iterable[tuple[int, bytes | None, bytes | None]]],
    ) -> None:
        """Feed ``count`` records at once, from ``first`` on, all in the dense span :meth:`dense_end`
        returned for ``first``: what :meth:`known` does for each. ``records`` gives their (offset, key,
        value) and is only called when some key needs them (tracked keys, the lookback range)."""
        self._seen += count
        if self._first is None:
            self._first = first
        decision = self._dense[self._dense_at][2]
        if decision is _COMMITTED:
            self._committed += count
        else:
            counts = self.stats.by_decision
            counts[decision.value] = counts.get(decision.value, 0) + count
        if not self._keys and self.lookback is None:
            return
        keys, lookback = self._keys, self.lookback
        for offset, key, value in records():
            if key is not None and (key in keys or (lookback and lookback[0] <= offset <= lookback[1])):
                self._legit(offset, key, value)

    def observe(
        self, offset: int, key: bytes | None, headers: Sequence[tuple[str, Any]] | None, value: bytes | None
    ) -> str | None:
        self._seen += 1
        if self._first is None:
            self._first = offset
        if headers is not None and headers == self._last_headers:
            entry = self._last_entry  # consecutive records of one writer task: the same headers
        else:
            try:
                meta = decode_headers(headers)
            except RecordDecodeError as exc:
                return self._dead(str(exc))
            entry = self.classify.entry(meta, self.partition)
            self._last_headers, self._last_entry = headers, entry
        decision = self.classify.decide(entry, self.partition, offset)
        if decision is _COMMITTED:  # the common case first: most records need nothing but counting
            self._committed += 1
            if key is not None and (self._keys or self.lookback is not None):
                self._legit(offset, key, value)
            return None
        meta = entry[0]
        counts = self.stats.by_decision
        counts[decision.value] = counts.get(decision.value, 0) + 1
        if decision in LEGIT:
            if key is not None:
                self._legit(offset, key, value)
            if decision is Decision.IN_FLIGHT:
                self._in_flight(offset, meta, decision)
            return None
        if decision is Decision.REDUNDANT:
            return self._redundant(offset, key, meta, value)
        if decision in RECONCILER_OUTPUT:
            if meta.reverses is not None and meta.reverses[0] == self.partition:
                self._reversed.add(meta.reverses[1])
            first = self._copies.first(meta, self.partition)
            if not first:
                stats = self.stats
                stats.copies_seen += 1
            if key is not None:
                state = self._keys.get(key)
                if state is None and self.lookback is not None and offset <= self.lookback[1]:
                    state = self._track(key)  # a previous run's output: it may shadow recent writes
                elif state is None and decision is Decision.REASSERT:
                    state = self._track(key)  # a half may be open: its originals may be gone (retention)
                if state is not None:
                    if first:  # readers count only a record's first copy: so does the key's image
                        state.tail = _Tail(offset, meta.record_type, value)
                    if decision is Decision.REASSERT:
                        _pair_up(state, value, meta.reasserts)
            return None
        if decision is Decision.DEAD_PENDING:  # will never commit; reversed once a successor commits
            if key is not None and (state := self._keys.get(key)) is not None:
                state.tail = _Tail(offset, RecordType.DATA, value)
            self._in_flight(offset, meta, decision)
            return None
        self.stats.foreign += 1  # FOREIGN: LogStore headers, but an epoch nobody claimed; left alone
        return None

    def _legit(self, offset: int, key: bytes, value: bytes | None) -> None:
        state = self._keys.get(key)
        if state is not None:
            state.legit = (offset, value)
            state.tail = _Tail(offset, RecordType.DATA, value)
        elif self.lookback is not None and self.lookback[0] <= offset <= self.lookback[1]:
            self._recent[key] = (offset, value)

    @property
    def dense(self) -> list[tuple[int, int, Decision]]:
        """The dense commit spans of the window (:func:`dense_spans`): sorted, non-overlapping."""
        return self._dense

    @property
    def follows_keys(self) -> bool:
        """Whether committed records must be fed one by one when their key is tracked, or in lookback."""
        return bool(self._keys) or self.lookback is not None

    def count_known(self, first_offset: int, counts: Mapping[Decision, int]) -> None:
        """Count records whose decision is known without their headers (committed or log-only, as in a
        dense span), without feeding them: what :meth:`known` does for each, except the key following
        (feed those of tracked keys, or in the lookback range, to :meth:`legit` as well)."""
        for decision, count in counts.items():
            if not count:
                continue
            self._seen += count
            if decision is _COMMITTED:
                self._committed += count
            else:
                by = self.stats.by_decision
                by[decision.value] = by.get(decision.value, 0) + count
        if self._first is None:
            self._first = first_offset

    def legit(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Follow a counted committed or log-only record (:meth:`count_known`) of a tracked key, or in
        the lookback range: the key's last legitimate image."""
        if key is not None:
            self._legit(offset, key, value)

    def observe_committed(self, count: int, first_offset: int) -> None:
        """Count ``count`` committed records of keys this planner does not track, outside the lookback
        range, without feeding them one by one (what :meth:`observe` would do with them: count them)."""
        self.count_known(first_offset, {_COMMITTED: count})

    def tracked_keys(self) -> Iterable[bytes]:
        """Keys whose committed records must still be fed one by one (they have per-key state)."""
        return self._keys.keys()

    def observe_undecodable(self, offset: int, reason: str) -> None:
        self._seen += 1
        if self._first is None:
            self._first = offset
        self._dead(reason)

    def _dead(self, reason: str) -> str:
        stats = self.stats
        stats.dead_lettered += 1
        short = reason.split(":")[0][:80]
        stats.dead_letter_reasons[short] = stats.dead_letter_reasons.get(short, 0) + 1
        return reason

    def _in_flight(self, offset: int, meta: RecordMeta, decision: Decision) -> None:
        stats = self.stats
        stats.skipped_in_flight += 1
        attempt = (meta.writer_id, meta.epoch, meta.batch_id, meta.task, meta.log_only)
        span = self._pending.get(attempt)
        if span is None:
            self._pending[attempt] = [offset, offset]
        else:
            span[1] = offset
        if not self._blocked:
            self._blocked = True
            stats.first_in_flight = {
                "offset": offset,
                "writer_id": meta.writer_id,
                "batch_id": meta.batch_id,
                "epoch": meta.epoch,
                "state": decision.value,
            }

    def _track(self, key: bytes) -> _KeyState:
        state = _KeyState()
        recent = self._recent.get(key)
        if recent is not None:
            state.legit = recent
        self._keys[key] = state
        return state

    def _redundant(self, offset: int, key: bytes | None, meta: RecordMeta, value: bytes | None) -> str | None:
        try:
            decode_value(value)
        except RecordDecodeError as exc:
            return self._dead(f"redundant record cannot be reversed: {exc}")
        stats = self.stats
        stats.redundant += 1
        attempt = f"{meta.writer_id}/{meta.batch_id}/{meta.epoch}"
        stats.redundant_by_attempt[attempt] = stats.redundant_by_attempt.get(attempt, 0) + 1
        assert value is not None  # decode_value refused None
        if key is None:
            self._keyless.append((offset, value))
            return None
        state = self._keys.get(key) or self._track(key)
        if state.first_redundant is None:
            state.first_redundant = offset
        state.redundant.append((offset, value))
        state.tail = _Tail(offset, RecordType.DATA, value)
        return None

    # -- planning --------------------------------------------------------------------------------------

    def finish(self) -> PartitionPlan:
        """What to write for this partition, and its statistics."""
        actions: list[tuple[str, bytes | None, int, bytes]] = []
        reversed_ = self._reversed
        stats = self.stats
        stats.scanned = self._seen
        stats.first_offset = self._first
        if self._committed:
            stats.by_decision[Decision.COMMITTED.value] = self._committed
        new_keyless = [r for r in self._keyless if r[0] not in reversed_]
        stats.already_reversed += len(self._keyless) - len(new_keyless)
        for offset, value in reversed(new_keyless):
            actions.append(("reversal", None, offset, value))
        for key, state in self._keys.items():
            for half, pair in state.open_halves or []:  # complete a pair a crash (or a copy) cut in two
                kind, _ = decode_value(half)
                actions.append(("complete", key, -1, half))
                self._completes.append(pair)
                state.tail = _Tail(-1, RecordType.REASSERT, with_kind(half, _FIRST_HALF[kind]))
                stats.reasserts_completed += 1
            new = [r for r in state.redundant if r[0] not in reversed_]
            stats.already_reversed += len(state.redundant) - len(new)
            for offset, value in reversed(new):
                actions.append(("reversal", key, offset, value))
            reassert = self._reassert(state, new)
            if reassert is not None:
                actions.append(("reassert", key, *reassert))
        stats.reversed = sum(1 for action in actions if action[0] == "reversal")
        stats.pending = [[*attempt, first, last] for attempt, (first, last) in self._pending.items()]
        self._keys.clear()
        self._keyless.clear()
        self._recent.clear()
        return PartitionPlan(self.partition, stats, actions, self._completes)

    def _reassert(self, state: _KeyState, new: list[tuple[int, bytes]]) -> tuple[int, bytes] | None:
        """The record whose image a reassert pair must restore after the key's reversals, or None."""
        legit = state.legit
        if legit is None:
            return None  # no legitimate record of the key in the window: the reversal chain restores it
        legit_offset, legit_value = legit
        tail = None if new else state.tail  # with new reversals, the key ends with our last one
        if not new and (tail is None or tail.offset == legit_offset):
            return None  # the key's last record is its last legitimate one: nothing to restore
        try:
            wanted = _image(legit_value)
        except RecordDecodeError:
            self.stats.reassert_skipped += 1
            return None
        after_first = state.first_redundant is not None and legit_offset > state.first_redundant
        tail_is_reassert = tail is not None and tail.record_type is RecordType.REASSERT
        # a legitimate record after a redundant one is restored (unless a reassert already ends the key);
        # otherwise only when the key's last image differs from the legitimate one
        if not (after_first and not tail_is_reassert) and _tail_image(new, tail) == wanted:
            return None
        self.stats.reasserted += 1
        assert legit_value is not None  # _image refused None
        return legit_offset, legit_value


def _tail_image(
    new: list[tuple[int, bytes]], tail: _Tail | None
) -> tuple[bool, tuple[tuple[str, Any], ...] | None]:
    """The image a key is left with: after our reversals (``new``), the reversal of its earliest new
    redundant record; else its last record's (``tail``). (False, None) when that record does not decode."""
    try:
        if new:
            kind, row = decode_value(new[0][1])
            return (True, upsert_image(kind.reversed(), row))
        assert tail is not None
        return _image(tail.value)
    except RecordDecodeError:
        return (False, None)


# --- a whole run, in memory (tests, small logs) --------------------------------------------------------


@dataclass(frozen=True)
class LogRecordIn:
    """One log record as scanned: what :meth:`PartitionPlanner.observe` needs."""

    partition: int
    offset: int
    key: bytes | None
    headers: Sequence[tuple[str, Any]] | None
    value: bytes | None


def plan_partitions(
    records: Iterable[LogRecordIn],
    state: ControlState,
    starts: Mapping[int, int],
    ends: Mapping[int, int],
    lookback: Mapping[int, tuple[int, int]] | None = None,
    *,
    dense: bool = True,
) -> tuple[list[PartitionPlan], list[tuple[LogRecordIn, str]]]:
    """Plan every partition from records in offset order per partition; returns plans and dead letters.

    Records outside [start, end) of their partition are ignored. ``dense=False`` reads every header.
    """
    classifier = Classifier(state)
    lookback = lookback or {}
    planners = {
        p: PartitionPlanner(
            p, starts[p], ends[p], classifier, lookback.get(p), dense_spans(state, p) if dense else None
        )
        for p in sorted(ends)
    }
    dead: list[tuple[LogRecordIn, str]] = []
    for record in records:
        planner = planners.get(record.partition)
        if planner is None or not starts[record.partition] <= record.offset < ends[record.partition]:
            continue
        if planner.known(record.offset, record.key, record.value):
            continue
        reason = planner.observe(record.offset, record.key, record.headers, record.value)
        if reason is not None:
            dead.append((record, reason))
    return [planner.finish() for planner in planners.values()], dead


# --- the run's summary and progress record ----------------------------------------------------------------


def summarize(stats: Iterable[PartitionStats]) -> dict[str, Any]:
    """The report's numbers over all partitions."""
    total: dict[str, Any] = {
        "scanned": 0,
        "redundant": 0,
        "reversed": 0,
        "reasserted": 0,
        "already_reversed": 0,
        "skipped_in_flight": 0,
        "dead_lettered": 0,
        "foreign": 0,
        "reassert_skipped": 0,
        "reasserts_completed": 0,
        "copies_seen": 0,
    }
    by_attempt: dict[str, int] = {}
    by_decision: dict[str, int] = {}
    reasons: dict[str, int] = {}
    in_flight = {}
    for s in stats:
        for name in total:
            total[name] += getattr(s, name)
        for attempt, count in s.redundant_by_attempt.items():
            by_attempt[attempt] = by_attempt.get(attempt, 0) + count
        for decision, count in s.by_decision.items():
            by_decision[str(decision)] = by_decision.get(str(decision), 0) + count
        for reason, count in s.dead_letter_reasons.items():
            reasons[reason] = reasons.get(reason, 0) + count
        if s.first_in_flight is not None:
            in_flight[str(s.partition)] = s.first_in_flight
    total["redundant_by_attempt"] = dict(sorted(by_attempt.items()))
    total["redundant_by_writer"] = _group(by_attempt, 0)
    total["redundant_by_batch"] = _group(by_attempt, 1)
    total["redundant_by_epoch"] = _group(by_attempt, 2)
    total["by_decision"] = dict(sorted(by_decision.items()))
    total["dead_letter_reasons"] = reasons
    total["in_flight"] = in_flight
    return total


def _group(by_attempt: Mapping[str, int], index: int) -> dict[str, int]:
    grouped: dict[str, int] = {}
    for attempt, count in by_attempt.items():
        writer, batch, epoch = attempt.rsplit("/", 2)
        name = (writer, f"{writer}/{batch}", f"{writer}/{epoch}")[index]
        grouped[name] = grouped.get(name, 0) + count
    return dict(sorted(grouped.items()))


def scan_gaps(stats: Iterable[PartitionStats]) -> list[Gap]:
    """Records deleted while the scan ran: a partition whose first record came after its start."""
    gaps = []
    for s in stats:
        if s.start >= s.end:
            continue
        first = s.first_offset if s.first_offset is not None else s.end
        if first > s.start:
            gaps.append(Gap(s.partition, s.start, first, "scan"))
    return gaps


def progress_value(
    *,
    positions: Mapping[int, int],
    safe_point: Mapping[int, int],
    output: Mapping[int, tuple[int, int]],
    pending: Mapping[str, list[list[Any]]] | None = None,
    lease_id: int,
    run: int,
    owner: str,
    summary: Mapping[str, Any],
    now_ms: int,
) -> dict[str, Any]:
    """The ``reconcile`` control record of a finished run."""
    return {
        "positions": {str(p): int(o) for p, o in sorted(positions.items())},
        "safe_point": {str(p): int(o) for p, o in sorted(safe_point.items())},
        "output": {str(p): [int(a), int(b)] for p, (a, b) in sorted(output.items())},
        "pending": dict(pending or {}),
        "lease": lease_id,
        "run": run,
        "owner": owner,
        "recorded_at_ms": now_ms,
        "report": {
            k: summary[k]
            for k in ("scanned", "redundant", "reversed", "reasserted", "already_reversed", "dead_lettered")
            if k in summary
        },
    }


def run_number(progress: Mapping[str, Any] | None) -> int:
    """The number of the next run (1 for the first)."""
    return int((progress or {}).get("run", 0)) + 1


def gap_value(gap: Gap, *, run: int, lease_id: int, now_ms: int) -> dict[str, Any]:
    """The ``log-gap/<partition>`` control record: this table's log needs a hybrid re-read."""
    return {
        **gap.to_dict(),
        "run": run,
        "lease": lease_id,
        "detected_at_ms": now_ms,
        "action": "hybrid re-read from a snapshot: log records in [from, to) were deleted unreconciled",
    }
