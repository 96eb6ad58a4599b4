"""When a writer attempt may commit a batch: the condition every dual-write commit checks.

A batch commit is a compare-and-set on the table's ``main`` ref: the attempt writes its batch to a
staging branch started at a *base* snapshot, decides with :func:`decide` against the commits of that
base (its lineage, plus the ledger), and moves ``main`` from the base to its branch head only if ``main``
still is the base. Because the decision is made against exactly the state the compare-and-set
requires, two invariants hold by construction, whatever the interleaving:

- **C1 (once)**: ``main``'s lineage holds each (writer, batch) at most once.
- **C2 (fencing)**: no attempt commits once a newer epoch of its writer is in force. A new epoch
  claims in the control topic, then *fences* the table: one catalog commit removes every older
  epoch's attempt refs. An attempt creates its refs (staging branch and fence tag, at its base) before
  it reads the control topic, and its publish requires its fence tag, so the publish lands before the
  fence or not at all; an attempt whose refs were created after the fence read the claim and decides
  fenced.

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


@dataclass(frozen=True)
class AttemptRefs:
    """The refs of one commit attempt: the branch it writes, the tag that proves it is not fenced."""

    branch: str
    fence_tag: str


def attempt_refs(writer_id: str, batch_id: int, epoch: int, attempt: int) -> AttemptRefs:
    """Names unique per attempt and safe as Iceberg refs and Spark identifiers."""
    suffix = f"{_writer_id_part(writer_id)}_{batch_id}_{epoch}_{attempt}"
    return AttemptRefs(STAGE_PREFIX + suffix, FENCE_PREFIX + suffix)


def stale_attempt_refs(refs: Iterable[str], writer_id: str, epoch: int) -> list[str]:
    """Attempt refs (branches and fence tags) of epochs of ``writer_id`` older than ``epoch``.

    A new epoch removes them when it fences the table: that ends any older attempt's right to publish,
    and lets the snapshots of attempts that died mid-commit expire.
    """
    stale = []
    for ref in refs:
        parts = _attempt_parts(ref, writer_id)
        if parts is not None and parts[1] < epoch:
            stale.append(ref)
    return sorted(stale)


STAGE_PREFIX = "logstore_stage_"
FENCE_PREFIX = "logstore_fence_"


def _attempt_parts(ref: str, writer_id: str) -> tuple[int, int, int] | None:
    """(batch, epoch, attempt) of an attempt ref of ``writer_id``; None for any other ref."""
    writer = _writer_id_part(writer_id) + "_"
    for prefix in (STAGE_PREFIX, FENCE_PREFIX):
        if ref.startswith(prefix + writer):
            parts = ref[len(prefix + writer) :].split("_")
            if len(parts) == 3 and all(p.isdigit() for p in parts):
                return int(parts[0]), int(parts[1]), int(parts[2])
    return None


def _writer_id_part(writer_id: str) -> str:
    safe = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in writer_id)
    digest = hashlib.sha256(writer_id.encode()).hexdigest()[:8]  # "a-b" and "a_b" stay apart
    return f"{safe}_{digest}"
