"""When a writer attempt may commit a batch: the condition every dual-write commit checks.

A batch commit is a compare-and-set on the table's ``main`` ref: the attempt writes its batch to a
staging branch started at a *base* snapshot, decides with :func:`decide` against the commits of that
base (its lineage, plus the ledger), and moves ``main`` from the base to its branch head only if ``main``
still is the base. Because the decision is made against exactly the state the compare-and-set
requires, two invariants hold by construction, whatever the interleaving:

- **C1 (once)**: ``main``'s lineage holds each (writer, batch) at most once.
- **C2 (fencing)**: no attempt commits after a newer epoch of its writer has committed, and none
  commits while the control topic already shows a newer epoch of its writer.

A lost compare-and-set is retried from a new base, and every retry decides again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from airflow_logstore.core.checkpoint import RETIRED_EPOCH, RetiredBatches
from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo


class Verdict(StrEnum):
    PROCEED = "proceed"
    ALREADY_COMMITTED = "already-committed"  # (writer, batch) is in the base: write nothing
    FENCED = "fenced"  # a newer epoch of the writer exists: stop, leave the records to reconciliation


@dataclass(frozen=True)
class CommitDecision:
    verdict: Verdict
    reason: str
    existing: CommitInfo | None = None  # the commit of (writer, batch) already in the base

    @property
    def proceed(self) -> bool:
        return self.verdict is Verdict.PROCEED


def decide(
    commits: Iterable[CommitInfo],
    latest_claimed_epoch: int | None,
    writer_id: str,
    batch_id: int,
    epoch: int,
    retired: RetiredBatches | None = None,
) -> CommitDecision:
    """May epoch ``epoch`` of ``writer_id`` commit ``batch_id`` on top of a base holding ``commits``?

    :param commits: every commit the base holds (its lineage, and the ledger: the ledger only ever
        records commits that reached ``main``).
    :param latest_claimed_epoch: the writer's newest epoch in the control topic, read after the base.
    :param retired: what is left of the writer's retired ledger entries (``core.checkpoint``).
    """
    newest_committed = retired.newest_epoch() if retired is not None else 0
    existing = None
    if retired is not None and retired.contains(batch_id):
        existing = CommitInfo(writer_id, batch_id, epoch=RETIRED_EPOCH)  # its details went with its records
    for commit in commits:
        if commit.writer_id != writer_id:
            continue
        newest_committed = max(newest_committed, commit.epoch)
        if commit.batch_id == batch_id and existing is None:
            existing = commit
    if newest_committed > epoch:
        return CommitDecision(
            Verdict.FENCED, f"epoch {newest_committed} of writer '{writer_id}' has committed", existing
        )
    if latest_claimed_epoch is not None and latest_claimed_epoch > epoch:
        return CommitDecision(
            Verdict.FENCED, f"epoch {latest_claimed_epoch} of writer '{writer_id}' was claimed", existing
        )
    if existing is not None:
        return CommitDecision(
            Verdict.ALREADY_COMMITTED,
            f"batch {batch_id} of writer '{writer_id}' is committed by epoch {existing.epoch}",
            existing,
        )
    return CommitDecision(Verdict.PROCEED, "no commit of this batch and no newer epoch", None)


def decide_on(state: ControlState, writer_id: str, batch_id: int, epoch: int) -> CommitDecision:
    """:func:`decide` against a control state merged with the base's lineage."""
    return decide(
        state.commits.values(),
        state.latest_epoch(writer_id),
        writer_id,
        batch_id,
        epoch,
        retired=state.retired.get(writer_id),
    )


def staging_branch(writer_id: str, batch_id: int, epoch: int, attempt: int) -> str:
    """The name of the branch one commit attempt writes to (unique per attempt, Iceberg-safe)."""
    return f"{_writer_prefix(writer_id)}{batch_id}_{epoch}_{attempt}"


def stale_staging_branches(refs: Iterable[str], writer_id: str, epoch: int) -> list[str]:
    """Staging branches that older epochs of ``writer_id`` left behind (an attempt killed mid-commit).

    They were never published; the newer epoch removes them so their snapshots can expire.
    """
    prefix = _writer_prefix(writer_id)
    stale = []
    for ref in refs:
        parts = ref[len(prefix) :].split("_") if ref.startswith(prefix) else []
        if len(parts) == 3 and all(p.isdigit() for p in parts) and int(parts[1]) < epoch:
            stale.append(ref)
    return sorted(stale)


def _writer_prefix(writer_id: str) -> str:
    safe = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in writer_id)
    digest = hashlib.sha256(writer_id.encode()).hexdigest()[:8]  # "a-b" and "a_b" stay apart
    return f"logstore_stage_{safe}_{digest}_"
