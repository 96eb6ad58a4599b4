"""Control-state checkpoints: read a checkpoint plus the control topic's tail, not the whole topic.

The control topic only grows (a claim, a ledger entry and a watermark per batch), and publishing,
consistent reads, reconciliation and every commit decision fold it. A checkpoint is the folded state as
of a control-topic offset (``through``); a reader folds the records after it onto it
(:func:`airflow_logstore.core.control.fold` is the same either way, because folding is applied record by
record and the checkpoint *is* the fold of the records up to ``through``).

**Retirement** keeps the state itself bounded. A ledger entry is needed to classify its batch's records
until either retention deletes them or a publish scan *settles* them: publishing records, with each
watermark move, the range it classified and the data records in it that are not committed (redundant or
foreign runs, usually none), so a settled record is classified from those ranges alone. Such an entry
leaves ``commits`` for a compact per-writer
summary (:class:`RetiredBatches`) that still answers what the protocol asks about old batches: *is
(writer, batch) committed?* (so a retried old batch is skipped, never committed twice) and *which batch
did epochs newer than e commit?* (successor logic for dead epochs). Its key is then deleted from the
control topic with a tombstone, so compaction removes it there too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_logstore.core import ranges
from airflow_logstore.core.lease import Lease
from airflow_logstore.core.summary import CommitInfo

FORMAT = 1
#: The epoch of a retired ledger entry as ``ControlState.committed`` returns it: committed, details gone.
RETIRED_EPOCH = 0
#: A checkpoint keeps at most this many of the most recent "newly visible" commit names (a log for people).
WATERMARK_COMMITS_KEPT = 1000


@dataclass
class RetiredBatches:
    """What is left of one writer's retired ledger entries.

    :param batches: committed batch ids, as sorted disjoint ``[first, last]`` ranges.
    :param frontier: ``[epoch, batch]`` pairs, epochs descending and batches ascending, such that for
        any epoch ``e`` the highest batch committed by an epoch newer than ``e`` is the batch of the last
        pair whose epoch is larger than ``e`` (the step function, with only its steps kept).
    """

    batches: list[list[int]] = field(default_factory=list)
    frontier: list[list[int]] = field(default_factory=list)

    def contains(self, batch_id: int) -> bool:
        return ranges.contains(self.batches, batch_id)

    def newest_epoch(self) -> int:
        return self.frontier[0][0] if self.frontier else 0

    def max_batch_after(self, epoch: int) -> int | None:
        found = None
        for pair_epoch, batch in self.frontier:
            if pair_epoch > epoch:
                found = batch
        return found

    def add(self, batch_id: int, epoch: int) -> RetiredBatches:
        """A new summary with one more retired commit (the receiver is left as it is)."""
        points = [*(list(p) for p in self.frontier), [epoch, batch_id]]
        return RetiredBatches(ranges.merge([*self.batches, [batch_id, batch_id]]), _frontier(points))


def _frontier(points: list[list[int]]) -> list[list[int]]:
    """Keep the steps of e -> max{batch : epoch > e}: walking epochs down, only rising batches count."""
    steps: list[list[int]] = []
    for epoch, batch in sorted(points, key=lambda p: (-p[0], p[1])):
        if steps and steps[-1][0] == epoch:
            steps[-1][1] = max(steps[-1][1], batch)
        elif not steps or batch > steps[-1][1]:
            steps.append([epoch, batch])
    return steps


def retirable(
    commit: CommitInfo, log_start: Mapping[int, int], settled: Mapping[int, Sequence[Sequence[int]]]
) -> bool:
    """True when no reader needs ``commit``'s ledger entry to classify its records: in every partition
    they were deleted by retention, or a publish scan settled them (``ControlState.settled_hole``
    classifies them then). A file-only commit has no records."""
    return all(
        last < log_start.get(partition, 0) or ranges.covers(settled.get(partition, ()), first, last)
        for partition, (first, last) in commit.offsets.items()
    )


def retire(state: Any, log_start: Mapping[int, int]) -> tuple[Any, list[tuple[str, int]]]:
    """(a new state without the retirable ledger entries, the (writer, batch) keys retired).

    The given state is left as it is.
    """
    keep: dict[tuple[str, int], CommitInfo] = {}
    retired = dict(state.retired)
    gone = []
    for key, commit in state.commits.items():
        if not retirable(commit, log_start, state.settled):
            keep[key] = commit
            continue
        retired[commit.writer_id] = retired.get(commit.writer_id, RetiredBatches()).add(
            commit.batch_id, commit.epoch
        )
        gone.append(key)
    return dataclasses.replace(state, commits=keep, retired=retired), sorted(gone)


# -- encoding --------------------------------------------------------------------------------------


def encode_state(state: Any, through: int) -> dict[str, Any]:
    """A JSON-able checkpoint of a :class:`~airflow_logstore.core.control.ControlState`.

    :raises TypeError: for a state field this module does not know how to keep (add it here).
    """
    out: dict[str, Any] = {"format": FORMAT, "through": through}
    for item in dataclasses.fields(state):
        value = getattr(state, item.name)
        codec = _CODECS.get(item.name)
        if codec is None:
            raise TypeError(f"control state field '{item.name}' has no checkpoint encoding")
        out[item.name] = codec[0](value)
    return out


def decode_state(data: Mapping[str, Any], state_type: type) -> tuple[Any, int]:
    """(state, through) from :func:`encode_state`'s output."""
    if data.get("format") != FORMAT:
        raise ValueError(f"unsupported checkpoint format {data.get('format')!r}")
    values = {}
    for item in dataclasses.fields(state_type):
        if item.name in data:
            values[item.name] = _CODECS[item.name][1](data[item.name])
    return state_type(**values), int(data["through"])


@dataclass
class Checkpoint:
    """A checkpoint record: the state folded through a control offset, and the id of the control
    topic it was made of (None when not known; a checkpoint of another topic is never read)."""

    state: Any  # a ControlState (core.control imports this module)
    through: int
    control_topic_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**encode_state(self.state, self.through), "control_topic_id": self.control_topic_id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], state_type: type) -> Checkpoint:
        state, through = decode_state(data, state_type)
        made_of = data.get("control_topic_id")
        return cls(state, through, str(made_of) if made_of is not None else None)


def _int_keys(value: Mapping[Any, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in value.items()}


def _from_int_keys(value: Mapping[str, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in value.items()}


def _same(value: Any) -> Any:
    return value


def _encode_leases(leases: Mapping[str, list[Any]]) -> dict[str, list[dict[str, Any]]]:
    return {name: [dataclasses.asdict(lease) for lease in claims] for name, claims in leases.items()}


def _decode_leases(data: Mapping[str, list[dict[str, Any]]]) -> dict[str, list[Lease]]:
    return {name: [Lease(**lease) for lease in claims] for name, claims in data.items()}


_CODECS: dict[str, tuple[Any, Any]] = {
    "epochs": (dict, dict),
    "commits": (
        lambda commits: [c.to_json() for c in commits.values()],
        lambda data: {(c.writer_id, c.batch_id): c for c in map(CommitInfo.from_json, data)},
    ),
    "retired": (
        lambda retired: {w: dataclasses.asdict(r) for w, r in retired.items()},
        lambda data: {w: RetiredBatches(**r) for w, r in data.items()},
    ),
    "watermark": (_int_keys, _from_int_keys),
    "watermark_commits": (lambda names: list(names)[-WATERMARK_COMMITS_KEPT:], list),
    # the checkpointer tombstones the watermark records it holds: none is left for the next one to
    "watermark_keys": (lambda keys: [], list),
    "settled": (_int_keys, _from_int_keys),
    "holes": (_int_keys, _from_int_keys),
    "leases": (_encode_leases, _decode_leases),
    "lease_fences": (dict, dict),
    "fenced_writes": (_same, int),
    "reconcile_positions": (_int_keys, _from_int_keys),
    "reconcile_lease": (_same, _same),
    "reconcile_progress": (_same, _same),
    "gaps": (_int_keys, _from_int_keys),
    "end_offset": (_same, int),
    "checkpoint_start": (_same, int),
    "malformed": (_same, int),
    "log_time_ms": (_same, int),
}
