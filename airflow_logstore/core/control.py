"""The control topic: a compacted, single-partition Kafka topic next to each log topic.

It is the LogStore's durable coordination state; reading it from the start and folding the records in
order (:func:`fold`) gives a :class:`ControlState`. Record keys:

``epoch/<writer>``        an epoch claim. The epoch **is the claim's offset + 1**: Kafka assigns offsets
                          atomically, so every claim is strictly larger than any earlier one, durably,
                          without a clock or a compare-and-set.
``commit/<writer>/<batch>``  the commit ledger: (writer, batch) -> epoch, snapshot, offsets. Survives
                          snapshot expiry (compaction keeps the latest record per key). The first entry
                          of a (writer, batch) counts, a retired one too. A log-only batch has no
                          compare-and-set to make its entry unique (two epochs may each write one), so
                          its key names the epoch, ``commit/<writer>/<batch>/<epoch>``: compaction keeps
                          both, and the first stays the one that counts.
``watermark/<id>``        the visibility watermark: per partition the highest offset below which every
                          record is decided. Merged with ``max``: it never moves backwards. Each move
                          has a key of its own, tombstoned once a checkpoint holds it: compaction keeps
                          the *last* record of a key, and the last move may be a stalled publisher's
                          older one (``watermark``, one key for all, was how earlier versions wrote it).
``lease/<name>``          a lease claim (e.g. the reconciler's); the lease id is the claim's offset + 1.
                          Who holds it is decided by the log alone (see :class:`Lease`).
``reconcile``             the reconciler's progress: per partition the next offset to scan (plus the
                          run number, safe point and output offsets of the run that wrote it).
``log-gap/<partition>``   records deleted by retention before reconciliation scanned them.

Progress and gap records carry the lease of the run that wrote them: a fencing token. Such a record
counts only if no newer lease has held the lease before it in the log (:func:`lease_fenced`), so a
reconciler that stalled past its lease (a GC pause, renewals failing) and writes late changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_logstore.core import ranges
from airflow_logstore.core.checkpoint import RETIRED_EPOCH, RetiredBatches
from airflow_logstore.core.lease import RECONCILER_LEASE, Lease
from airflow_logstore.core.records import LeaseRelease, WatermarkRecord, lease_record
from airflow_logstore.core.summary import CommitInfo

K_EPOCH = "epoch/"
K_COMMIT = "commit/"
K_WATERMARK = "watermark"
K_WATERMARK_PREFIX = "watermark/"
K_LEASE = "lease/"
K_RECONCILE = "reconcile"
K_GAP = "log-gap/"


@dataclass(frozen=True)
class ControlRecord:
    """One control record; ``timestamp_ms`` is Kafka's (the broker's ``LogAppendTime`` on the topic)."""

    key: str
    value: dict[str, Any] | None
    offset: int
    timestamp_ms: int | None = None


@dataclass
class ControlState:
    """Everything the control topic says, folded in offset order."""

    epochs: dict[str, int] = field(default_factory=dict)
    commits: dict[tuple[str, int], CommitInfo] = field(default_factory=dict)
    retired: dict[str, RetiredBatches] = field(default_factory=dict)  # see core.checkpoint
    watermark: dict[int, int] = field(default_factory=dict)
    watermark_commits: list[str] = field(default_factory=list)
    #: keys of the watermark records folded since the checkpoint (tombstoned once a checkpoint holds them)
    watermark_keys: list[str] = field(default_factory=list)
    # per partition: the offset ranges publish scans settled, and inside them the data records that are
    # not committed ("redundant" / "foreign" runs); see core.visibility.WatermarkScan.settled
    settled: dict[int, list[list[int]]] = field(default_factory=dict)
    holes: dict[int, dict[str, list[list[int]]]] = field(default_factory=dict)
    leases: dict[str, list[Lease]] = field(default_factory=dict)
    #: per lease name the newest lease id seen holding it: writes under an older lease are ignored
    lease_fences: dict[str, int] = field(default_factory=dict)
    fenced_writes: int = 0  # progress and gap records of a lease that had lost it (ignored)
    reconcile_positions: dict[int, int] = field(default_factory=dict)
    reconcile_lease: int | None = None
    reconcile_progress: dict[str, Any] | None = None  # the latest ``reconcile`` record, as written
    gaps: dict[int, dict[str, Any]] = field(default_factory=dict)
    end_offset: int = 0
    checkpoint_start: int = 0  # the control offset folding started from (after the checkpoint read)
    malformed: int = 0
    log_time_ms: int = 0  # the latest record timestamp folded: the clock leases are judged by

    def latest_epoch(self, writer_id: str) -> int | None:
        return self.epochs.get(writer_id)

    def committed(self, writer_id: str, batch_id: int) -> CommitInfo | None:
        """The commit of (writer, batch); a retired one comes back with epoch 0 and nothing else known."""
        commit = self.commits.get((writer_id, batch_id))
        if commit is None and writer_id in self.retired and self.retired[writer_id].contains(batch_id):
            return CommitInfo(writer_id, batch_id, epoch=RETIRED_EPOCH)
        return commit

    def max_batch_committed_after(self, writer_id: str, epoch: int) -> int | None:
        """Highest batch of ``writer_id`` committed by an epoch newer than ``epoch``."""
        batches = [c.batch_id for c in self.commits.values() if c.writer_id == writer_id and c.epoch > epoch]
        retired = self.retired.get(writer_id)
        older = retired.max_batch_after(epoch) if retired is not None else None
        if older is not None:
            batches.append(older)
        return max(batches) if batches else None

    def settled_hole(self, partition: int, offset: int) -> str | None:
        """For a record a publish scan settled: "" when committed data, else its hole kind; None when
        no publish scan recorded a decision for this offset."""
        if not ranges.contains(self.settled.get(partition, ()), offset):
            return None
        for kind, runs in self.holes.get(partition, {}).items():
            if ranges.contains(runs, offset):
                return kind
        return ""

    def live_lease(self, name: str) -> Lease | None:
        """The lease holder at the end of the folded log: its first live claim, in log order."""
        for lease in self.leases.get(name, []):
            if lease.live(self.log_time_ms):
                return lease
        return None


def _apply(state: ControlState, record: ControlRecord) -> None:
    key, value = record.key, record.value
    state.log_time_ms = max(state.log_time_ms, record.timestamp_ms or 0)
    if key.startswith(K_EPOCH):
        if value is not None:
            writer = key[len(K_EPOCH) :]
            state.epochs[writer] = max(state.epochs.get(writer, 0), record.offset + 1)
    elif key.startswith(K_COMMIT):
        if value is not None:
            commit = CommitInfo.from_json(value)
            if state.committed(commit.writer_id, commit.batch_id) is None:  # the first one counts
                state.commits[commit.key] = commit
    elif key == K_WATERMARK or key.startswith(K_WATERMARK_PREFIX):
        if value is not None:
            _apply_watermark(state, WatermarkRecord.from_json(value))
            if key != K_WATERMARK:
                state.watermark_keys.append(key)
    elif key.startswith(K_LEASE):
        _apply_lease(state, key[len(K_LEASE) :], value, record)
        lease_fenced(state, key[len(K_LEASE) :], None)
    elif key == K_RECONCILE:
        if value is not None and not _fenced(state, value):
            state.reconcile_positions = {int(p): int(o) for p, o in (value.get("positions") or {}).items()}
            state.reconcile_lease = value.get("lease")
            state.reconcile_progress = value
    elif key.startswith(K_GAP) and value is not None and not _fenced(state, value):
        state.gaps[int(key[len(K_GAP) :])] = value
    state.end_offset = max(state.end_offset, record.offset + 1)


def lease_fenced(state: ControlState, name: str, lease_id: int | None) -> bool:
    """Whether a write under ``lease_id`` of lease ``name``, at the end of the folded log, comes after a
    newer lease held it (then the write must not count); first raises the lease's fence to its live
    holder. None: only raise the fence.

    The holder is judged by the log's own time (:class:`Lease`), so every reader of the log prefix
    agrees. A write of a lease whose claim compaction removed (older than every claim the fold knows)
    counts: nothing newer held the lease as far as the log still tells.
    """
    holder = state.live_lease(name)
    if holder is not None and holder.lease_id > state.lease_fences.get(name, 0):
        state.lease_fences[name] = holder.lease_id
    return lease_id is not None and lease_id < state.lease_fences.get(name, 0)


def _fenced(state: ControlState, value: dict[str, Any]) -> bool:
    """A reconciler progress or gap record written under a lease that had lost it: counted, ignored."""
    lease = value.get("lease")
    if lease is None or not lease_fenced(state, RECONCILER_LEASE, int(lease)):
        return False
    state.fenced_writes += 1
    return True


def _apply_watermark(state: ControlState, move: WatermarkRecord) -> None:
    """Max-merge the move's offsets (W1); add the commits it made visible and the ranges it settled."""
    for p, offset in move.offsets.items():
        state.watermark[p] = max(state.watermark.get(p, -1), offset)
    state.watermark_commits.extend(move.commits)
    for p, span in move.scanned.items():
        state.settled[p] = ranges.merge([*state.settled.get(p, []), span])
    for p, kinds in move.holes.items():
        merged = state.holes.setdefault(p, {})
        for kind, runs in kinds.items():
            merged[kind] = ranges.merge([*merged.get(kind, []), *runs])


def _apply_lease(state: ControlState, name: str, value: dict[str, Any] | None, record: ControlRecord) -> None:
    leases = state.leases.setdefault(name, [])
    if value is None:
        return
    claim = lease_record(value)
    if isinstance(claim, LeaseRelease):
        leases[:] = [
            replace(lease, released=True) if lease.lease_id == claim.release else lease for lease in leases
        ]
        return
    # Kafka's timestamp says when it was written; the writer's own stamp only without one
    written = record.timestamp_ms if record.timestamp_ms is not None else claim.written_at_ms
    ttl = claim.ttl_for()
    state.log_time_ms = max(state.log_time_ms, written)  # a no-op unless the record has no timestamp
    entry = Lease(name, record.offset + 1, claim.owner, written + ttl, False, record.offset, ttl)
    if claim.renews is None:
        leases.append(entry)
        return
    lease_id = claim.renews
    for index, current in enumerate(leases):
        # a renewal extends a lease that is still live at the log's time; an expired, released or
        # compacted-away one stays as it is (it cannot come back ahead of newer claims)
        if current.lease_id == lease_id and current.live(state.log_time_ms):
            leases[index] = replace(
                current, expires_at_ms=written + ttl, basis_offset=record.offset, ttl_ms=ttl
            )


def rebased(checkpoint: ControlState, state: ControlState) -> ControlState:
    """``checkpoint`` (a later checkpoint's state) with what ``state`` (an earlier fold, e.g. a
    follower's) knows that it may lack: ledger entries it retired, settled ranges and holes, the highest
    watermark and epochs.

    A reader that missed control records (compaction removed them) re-bases on the latest checkpoint;
    everything either fold holds is a fact of the control topic, and keeping the older fold's ledger
    entries matters: a checkpoint retires an entry once retention deleted its records, but a follower
    may still hold those records in its buffer, and only the entry classifies them as committed.
    ``checkpoint`` is changed and returned.
    """
    for key, commit in state.commits.items():
        checkpoint.commits.setdefault(key, commit)
    for writer, epoch in state.epochs.items():
        checkpoint.epochs[writer] = max(checkpoint.epochs.get(writer, 0), epoch)
    for partition, offset in state.watermark.items():
        checkpoint.watermark[partition] = max(checkpoint.watermark.get(partition, -1), offset)
    for partition, spans in state.settled.items():
        checkpoint.settled[partition] = ranges.merge([*checkpoint.settled.get(partition, []), *spans])
    for partition, kinds in state.holes.items():
        merged = checkpoint.holes.setdefault(partition, {})
        for kind, runs in kinds.items():
            merged[kind] = ranges.merge([*merged.get(kind, []), *runs])
    return checkpoint


def fold(records: Iterable[ControlRecord], state: ControlState | None = None) -> ControlState:
    """Apply records in offset order; a malformed record of a known kind is skipped, never fatal."""
    state = state or ControlState()
    for record in records:
        try:
            _apply(state, record)
        except (KeyError, ValueError, TypeError, AttributeError):
            state.malformed += 1
            state.end_offset = max(state.end_offset, record.offset + 1)
    return state


def encode(value: Mapping[str, Any] | None) -> bytes | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def decode(
    key: bytes | None, value: bytes | None, offset: int, timestamp_ms: int | None = None
) -> ControlRecord | None:
    """Decode one control-topic record; foreign records yield None (they are ignored, not fatal)."""
    if key is None:
        return None
    try:
        text_key = key.decode()
        payload = None if value is None else json.loads(value)
    except (UnicodeDecodeError, ValueError):
        return None
    if payload is not None and not isinstance(payload, dict):
        return None
    return ControlRecord(text_key, payload, offset, timestamp_ms)


def watermark_key(unique: str) -> str:
    """The key of one watermark move (``unique``: an id no other move has, e.g. a random hex)."""
    return f"{K_WATERMARK_PREFIX}{unique}"


def commit_key(writer_id: str, batch_id: int) -> str:
    return f"{K_COMMIT}{writer_id}/{batch_id}"


def ledger_key(commit: CommitInfo) -> str:
    """The control-topic key of ``commit``'s ledger entry: a log-only batch's names its epoch too."""
    if commit.log_only:
        return f"{commit_key(commit.writer_id, commit.batch_id)}/{commit.epoch}"
    return commit_key(commit.writer_id, commit.batch_id)


def epoch_key(writer_id: str) -> str:
    return f"{K_EPOCH}{writer_id}"


def lease_key(name: str) -> str:
    return f"{K_LEASE}{name}"


def gap_key(partition: int) -> str:
    return f"{K_GAP}{partition}"
