"""The commit ledger next to the table's live snapshots (no I/O).

A commit is in the table (a snapshot of ``main``) before it is in the control topic's ledger: the
writer records it after its compare-and-set, and may die in between. Every operation that decides
from the control state therefore adds the live snapshots' commits to it (:func:`with_commits`), and
publishing copies the ones the ledger lacks into it (:func:`missing_commits`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from airflow_logstore.core.control import ControlState
from airflow_logstore.core.summary import CommitInfo


def missing_commits(state: ControlState, commits: Iterable[CommitInfo]) -> list[CommitInfo]:
    """The commits the ledger lacks, in their order; a retired batch counts as recorded.

    The first commit of a (writer, batch) wins, as the ledger's own fold keeps the first entry.
    """
    missing: dict[tuple[str, int], CommitInfo] = {}
    for commit in commits:
        if commit.key in missing or state.committed(commit.writer_id, commit.batch_id) is not None:
            continue
        missing[commit.key] = commit
    return list(missing.values())


def with_commits(state: ControlState, commits: Iterable[CommitInfo]) -> ControlState:
    """A new state whose ledger also holds ``commits`` (an entry already there wins).

    ``state`` is left as it is; the new state shares its other fields (fold onto one of them only).
    """
    merged = dict(state.commits)
    for commit in commits:
        merged.setdefault(commit.key, commit)
    return replace(state, commits=merged)


def ledger_name(commit: CommitInfo) -> str:
    """How reports name a commit: ``writer/batch/epoch``."""
    return f"{commit.writer_id}/{commit.batch_id}/{commit.epoch}"


__all__ = ["ledger_name", "missing_commits", "with_commits"]
