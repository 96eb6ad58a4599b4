"""The control topic: a compacted, single-partition Kafka topic next to each log topic.

It is the LogStore's durable coordination state; reading it from the start and folding the records in
order (:func:`fold`) gives a :class:`ControlState`. Record keys:

``epoch/<writer>``        an epoch claim. The epoch **is the claim's offset + 1**: Kafka assigns offsets
                          atomically, so every claim is strictly larger than any earlier one, durably,
                          without a clock or a compare-and-set.
``commit/<writer>/<batch>``  the commit ledger: (writer, batch) -> epoch, snapshot, offsets. Survives
                          snapshot expiry (compaction keeps the latest record per key).
``watermark``             the visibility watermark: per partition the highest offset below which every
                          record is decided. Merged with ``max``: it never moves backwards.
``lease/<name>``          a lease claim (e.g. the reconciler's); the lease id is the claim's offset + 1.
``reconcile``             the reconciler's progress: per partition the next offset to scan (plus the
                          run number, safe point and output offsets of the run that wrote it).
``log-gap/<partition>``   records deleted by retention before reconciliation scanned them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_logstore.core.summary import CommitInfo

K_EPOCH = "epoch/"
K_COMMIT = "commit/"
K_WATERMARK = "watermark"
K_LEASE = "lease/"
K_RECONCILE = "reconcile"
K_GAP = "log-gap/"


@dataclass(frozen=True)
class ControlRecord:
    key: str
    value: dict[str, Any] | None
    offset: int


@dataclass(frozen=True)
class Lease:
    name: str
    lease_id: int
    owner: str
    expires_at_ms: int
    released: bool = False

    def live(self, now_ms: int) -> bool:
        return not self.released and self.expires_at_ms > now_ms


@dataclass
class ControlState:
    """Everything the control topic says, folded in offset order."""

    epochs: dict[str, int] = field(default_factory=dict)
    commits: dict[tuple[str, int], CommitInfo] = field(default_factory=dict)
    watermark: dict[int, int] = field(default_factory=dict)
    watermark_commits: list[str] = field(default_factory=list)
    leases: dict[str, list[Lease]] = field(default_factory=dict)
    reconcile_positions: dict[int, int] = field(default_factory=dict)
    reconcile_lease: int | None = None
    reconcile_progress: dict[str, Any] | None = None  # the latest ``reconcile`` record, as written
    gaps: dict[int, dict[str, Any]] = field(default_factory=dict)
    end_offset: int = 0
    malformed: int = 0

    def latest_epoch(self, writer_id: str) -> int | None:
        return self.epochs.get(writer_id)

    def committed(self, writer_id: str, batch_id: int) -> CommitInfo | None:
        return self.commits.get((writer_id, batch_id))

    def max_batch_committed_after(self, writer_id: str, epoch: int) -> int | None:
        """Highest batch of ``writer_id`` committed by an epoch newer than ``epoch``."""
        batches = [c.batch_id for c in self.commits.values() if c.writer_id == writer_id and c.epoch > epoch]
        return max(batches) if batches else None

    def live_lease(self, name: str, now_ms: int) -> Lease | None:
        """The lease holder: the first live claim in log order (the log decides races)."""
        for lease in self.leases.get(name, []):
            if lease.live(now_ms):
                return lease
        return None


def _apply(state: ControlState, record: ControlRecord) -> None:
    key, value = record.key, record.value
    if key.startswith(K_EPOCH):
        if value is not None:
            writer = key[len(K_EPOCH) :]
            state.epochs[writer] = max(state.epochs.get(writer, 0), record.offset + 1)
    elif key.startswith(K_COMMIT):
        if value is not None:
            commit = CommitInfo.from_json(value)
            state.commits.setdefault(commit.key, commit)
    elif key == K_WATERMARK:
        if value is not None:
            for partition, offset in (value.get("offsets") or {}).items():
                p = int(partition)
                state.watermark[p] = max(state.watermark.get(p, -1), int(offset))
            state.watermark_commits.extend(value.get("commits") or [])
    elif key.startswith(K_LEASE):
        _apply_lease(state, key[len(K_LEASE) :], value, record.offset)
    elif key == K_RECONCILE:
        if value is not None:
            state.reconcile_positions = {int(p): int(o) for p, o in (value.get("positions") or {}).items()}
            state.reconcile_lease = value.get("lease")
            state.reconcile_progress = value
    elif key.startswith(K_GAP) and value is not None:
        state.gaps[int(key[len(K_GAP) :])] = value
    state.end_offset = max(state.end_offset, record.offset + 1)


def _apply_lease(state: ControlState, name: str, value: dict[str, Any] | None, offset: int) -> None:
    leases = state.leases.setdefault(name, [])
    if value is None:
        return
    if value.get("release") is not None:
        released = int(value["release"])
        leases[:] = [
            Lease(lease.name, lease.lease_id, lease.owner, lease.expires_at_ms, True)
            if lease.lease_id == released
            else lease
            for lease in leases
        ]
        return
    lease_id = int(value.get("renews", offset + 1))
    renewed = [lease for lease in leases if lease.lease_id == lease_id]
    entry = Lease(name, lease_id, str(value.get("owner", "")), int(value.get("expires_at_ms", 0)))
    if not renewed:
        if "renews" not in value:
            leases.append(entry)
        return  # a renewal of a lease this log does not hold (compacted away) revives nothing
    current = renewed[0]
    written_at = int(value.get("renewed_at_ms", 0))
    if current.released or (written_at and written_at >= current.expires_at_ms):
        return  # renewing a released or already expired lease cannot bring it back ahead of newer claims
    leases[:] = [entry if lease.lease_id == lease_id else lease for lease in leases]


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


def decode(key: bytes | None, value: bytes | None, offset: int) -> ControlRecord | None:
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
    return ControlRecord(text_key, payload, offset)


def commit_key(writer_id: str, batch_id: int) -> str:
    return f"{K_COMMIT}{writer_id}/{batch_id}"


def epoch_key(writer_id: str) -> str:
    return f"{K_EPOCH}{writer_id}"


def lease_key(name: str) -> str:
    return f"{K_LEASE}{name}"


def gap_key(partition: int) -> str:
    return f"{K_GAP}{partition}"
