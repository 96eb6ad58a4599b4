"""The control topic's record payloads as typed values (no I/O), as pyiceberg names its table updates.

Each payload is written with ``to_json()`` and read back with ``from_json()``; :func:`control.fold`
decodes every record through these classes. Reading is as lenient as the protocol asks: fields a
payload may lack (older writers, or not needed to decide) get their defaults, and a value of the wrong
type raises ``ValueError``/``TypeError``/``KeyError``, which the fold counts as a malformed record.

A commit's ledger entry is :class:`~airflow_logstore.core.summary.CommitInfo`; a checkpoint is a
:class:`~airflow_logstore.core.control.ControlState` encoded by :mod:`airflow_logstore.core.checkpoint`
(:class:`Checkpoint` adds what it was made of). Reconciler progress and gap records are built by
:mod:`airflow_logstore.core.reconcile`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class Payload(Protocol):
    """A control record's value: what :meth:`ControlTopic.append` writes."""

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class EpochClaim:
    """``epoch/<writer>``: a writer claims a new epoch (the record's offset + 1). Only its presence
    counts; the fields say who claimed it and when, for people reading the topic."""

    writer: str
    owner: str = ""
    claimed_at_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"writer": self.writer, "owner": self.owner, "claimed_at_ms": self.claimed_at_ms}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> EpochClaim:
        return cls(
            str(value.get("writer", "")), str(value.get("owner", "")), int(value.get("claimed_at_ms", 0))
        )


@dataclass(frozen=True)
class WatermarkRecord:
    """``watermark/<id>``: one move of the visibility watermark, the commits it made visible and what
    its publish scan settled (per partition the range it classified, and inside it the records that are
    not committed, by kind: see ``core.visibility.WatermarkScan.settled``)."""

    offsets: dict[int, int]
    commits: list[str] = field(default_factory=list)
    scanned: dict[int, list[int]] = field(default_factory=dict)
    holes: dict[int, dict[str, list[list[int]]]] = field(default_factory=dict)
    snapshot_id: int | None = None
    published_at_ms: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
            "commits": list(self.commits),
            "snapshot_id": self.snapshot_id,
            "published_at_ms": self.published_at_ms,
            "scanned": {str(p): list(span) for p, span in sorted(self.scanned.items())},
            "holes": {str(p): kinds for p, kinds in sorted(self.holes.items())},
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> WatermarkRecord:
        snapshot = value.get("snapshot_id")
        return cls(
            offsets={int(p): int(o) for p, o in (value.get("offsets") or {}).items()},
            commits=[str(name) for name in value.get("commits") or []],
            scanned={int(p): [int(a) for a in span] for p, span in (value.get("scanned") or {}).items()},
            holes={
                int(p): {str(kind): [list(run) for run in runs] for kind, runs in kinds.items()}
                for p, kinds in (value.get("holes") or {}).items()
            },
            snapshot_id=int(snapshot) if snapshot is not None else None,
            published_at_ms=int(value.get("published_at_ms", 0)),
        )


@dataclass(frozen=True)
class LeaseClaim:
    """``lease/<name>``: a claim of a lease (its id is the record's offset + 1), or a renewal of the
    lease ``renews``. It lasts ``ttl_ms`` from the record's Kafka timestamp (see ``core.lease.Lease``).

    :param written_at_ms: the writer's own clock when it sent the record (only used when the record
        has no Kafka timestamp)
    :param expires_at_ms: how versions before ``ttl_ms`` said how long it lasts (read, never written)
    """

    owner: str
    ttl_ms: int | None
    written_at_ms: int = 0
    renews: int | None = None
    expires_at_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        stamp = "renewed_at_ms" if self.renews is not None else "claimed_at_ms"
        value: dict[str, Any] = {"owner": self.owner, "ttl_ms": self.ttl_ms, stamp: self.written_at_ms}
        if self.renews is not None:
            value["renews"] = self.renews
        return value

    def ttl_for(self) -> int:
        """How long it lasts: ``ttl_ms``, or for an older writer its absolute expiry less its stamp."""
        if self.ttl_ms is not None:
            return self.ttl_ms
        if self.expires_at_ms is None or not self.written_at_ms:
            return 0
        return self.expires_at_ms - self.written_at_ms

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> LeaseClaim:
        ttl, renews, expires = value.get("ttl_ms"), value.get("renews"), value.get("expires_at_ms")
        return cls(
            owner=str(value.get("owner", "")),
            ttl_ms=int(ttl) if ttl is not None else None,
            written_at_ms=int(value.get("renewed_at_ms", value.get("claimed_at_ms", 0))),
            renews=int(renews) if renews is not None else None,
            expires_at_ms=int(expires) if expires is not None else None,
        )


@dataclass(frozen=True)
class LeaseRelease:
    """``lease/<name>``: the holder of lease ``release`` gives it up."""

    release: int
    owner: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"release": self.release, "owner": self.owner}


def as_json(value: Payload | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A record's value as written: a typed payload's JSON, a JSON mapping as it is, None (a tombstone)."""
    if value is None:
        return None
    return dict(value) if isinstance(value, Mapping) else value.to_json()


def lease_record(value: Mapping[str, Any]) -> LeaseClaim | LeaseRelease:
    """A ``lease/<name>`` payload: a release when it names one, else a claim or renewal."""
    if value.get("release") is not None:
        return LeaseRelease(int(value["release"]), str(value.get("owner", "")))
    return LeaseClaim.from_json(value)


__all__ = [
    "EpochClaim",
    "LeaseClaim",
    "LeaseRelease",
    "Payload",
    "WatermarkRecord",
    "as_json",
    "lease_record",
]
