"""The protocol under 10,000 seeded interleavings, and proof that the checker can fail.

Replay one seed (its trace is printed): ``LOGSTORE_SIM_SEED=123 pytest tests/simulation -k replay -s``;
with a planted bug: ``LOGSTORE_SIM_BUGS=decide_once``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import fields
from typing import Any

import pytest

from .actors import Bugs
from .oracle import (
    BATCH_MISSING,
    BATCH_TWICE,
    CONSISTENT_DUPLICATE,
    CONSISTENT_LOST,
    CONSISTENT_UNCOMMITTED,
    EVENTUAL_FOLD,
    FEED_DUPLICATE,
    FENCED_COMMIT,
    HYBRID,
    HYBRID_SPLIT_PAIR,
    LEDGER_LOST,
    WATERMARK_BACK,
)
from .sim import Hazards, run

SEEDS = 10_000
CHUNK = 500


@pytest.mark.parametrize(
    "first", range(0, SEEDS, CHUNK), ids=lambda first: f"seeds{first}-{first + CHUNK - 1}"
)
def test_seeds(first: int) -> None:
    failures = [result for result in map(run, range(first, first + CHUNK)) if not result.ok]
    assert not failures, f"{len(failures)} seed(s) failed; the first:\n" + "\n\n".join(
        r.explain() for r in failures[:2]
    )


FEED_SEEDS = 300


def test_seeds_with_the_committed_feed(record_property: Any) -> None:
    """Issue 37: every publisher also copies to the committed feed (its token, progress, copy, commit as
    separate steps, so publishers overlap inside them); the oracle checks the feed (each committed record
    once, nothing else, in log order) besides everything else, and these runs must reach the races."""
    seen: Counter[str] = Counter()
    failures = []
    for seed in range(FEED_SEEDS):
        result = run(seed, hazards=Hazards(committed_feed=True))
        seen.update(set(result.events))
        if not result.ok:
            failures.append(result)
    assert not failures, f"{len(failures)} seed(s) failed; the first:\n" + failures[0].explain()
    reached = {event: seen[event] for event in ("feed copy committed", "feed copy fenced", "crash publisher")}
    record_property("report", f"seeds (of {FEED_SEEDS}) reaching: {reached}")
    assert all(count >= 5 for count in reached.values()), reached


def _bugs_from_env() -> Bugs:
    names = [n.strip() for n in os.environ.get("LOGSTORE_SIM_BUGS", "").split(",") if n.strip()]
    known = {f.name for f in fields(Bugs)}
    unknown = set(names) - known
    assert not unknown, f"unknown LOGSTORE_SIM_BUGS {sorted(unknown)}; known: {sorted(known)}"
    return Bugs(**dict.fromkeys(names, True))


def _hazards_from_env() -> Hazards:
    """``LOGSTORE_SIM_HAZARDS=eager_cleaner=True,two_reconcilers=False``: a narrowed run."""
    pairs = [p.split("=") for p in os.environ.get("LOGSTORE_SIM_HAZARDS", "").split(",") if p.strip()]
    return Hazards(**{name.strip(): value.strip() == "True" for name, value in pairs})


def test_replay() -> None:
    """Replays ``LOGSTORE_SIM_SEED`` (with ``LOGSTORE_SIM_BUGS`` and ``LOGSTORE_SIM_HAZARDS``) and prints
    its whole trace."""
    seed = os.environ.get("LOGSTORE_SIM_SEED")
    if seed is None:
        pytest.skip("set LOGSTORE_SIM_SEED=<seed> to replay one run")
    result = run(int(seed), _bugs_from_env(), _hazards_from_env())
    print(result.explain(last=len(result.trace)))
    assert result.ok, result.explain()


def test_runs_are_deterministic() -> None:
    for seed in (1, 2, 3):
        first, second = run(seed), run(seed)
        assert first.trace == second.trace and first.violations == second.violations


# What the interleavings must keep exercising (a simulation that stops reaching a race proves nothing).
COVERED = (
    "zombie produced after a newer epoch was claimed",
    "fenced",
    "fence removed refs",
    "fenced at publish",
    # not "already committed at commit": with fences an older epoch cannot commit after a newer one
    # checked the batch (its fence comes first), so a batch is found committed at the state check only
    "batch skipped",
    "commit CAS lost",
    "stage resubmitted",
    "task retried",
    "crash writer",
    "crash publisher",
    "crash reconciler",
    "crash compaction",
    "watermark blocked by an undecided record",
    "reversal written",
    "reassert written",
    "compaction CAS lost",
    "snapshots expired",
    "watermark settled a hole",
    "checkpoint written",
    "commits retired",
    "control read from a checkpoint",
    "control read of the whole topic past a checkpoint",
    "follower from a checkpoint",
    "read a retired commit's record",
    "read a settled redundant record",
    "follower held an undecided record below the watermark",
    "retention deleted records a reader had not read",
    "commit retired because retention deleted its records",
    "retention gap (log-start)",
    "retention gap (scan)",
    "publish scan failed",
    "read skipped deleted records",
    # issue 33: the actors around the writer
    "reconcile task retried",
    "reconciler found the lease held",
    "reconciler produced past its lease",
    "reconciler fenced",
    "reader skipped a copy of a reconciler record",
    "control topic compacted",
    "compaction removed a ledger entry",
    "compaction removed a tombstone",
    "follower re-based on a checkpoint after compaction",
    "checkpoint fenced",
    "checkpoint skipped",
    "commit state unknown",
)


def test_the_seeds_reach_the_races(record_property: Any) -> None:
    seen: Counter[str] = Counter()
    for seed in range(200):
        seen.update(set(run(seed).events))
    record_property(
        "report", "seeds (of 200) reaching each event: " + ", ".join(f"{e} {seen[e]}" for e in COVERED)
    )
    missing = [event for event in COVERED if seen[event] < 5]
    assert not missing, f"events reached by fewer than 5 of 200 seeds: {missing} ({dict(seen)})"


# Each planted bug (a test-only switch restoring the old behaviour of a hole of issue 13 or 33) must be
# found within `within` seeds, as one of the named invariants; a bug about one hazard is looked for in
# runs narrowed to it (`Hazards`), and the first seed that finds it is named in the comment.
PLANTED: list[tuple[str, set[str], int] | tuple[str, set[str], int, Hazards]] = [
    ("decide_once", {BATCH_TWICE, FENCED_COMMIT}, 300),
    ("ignore_fence", {FENCED_COMMIT}, 1000),
    ("attempt_number_tags", {CONSISTENT_UNCOMMITTED, CONSISTENT_DUPLICATE}, 300),
    ("state_before_ends", {CONSISTENT_LOST}, 1000),
    ("advance_positions", {HYBRID}, 300),
    # the watermark's pair rule; an eventual hybrid read's own pairing (hybrid_counts_unpaired_closes
    # turns it off) drops the closing half of a split pair too, so both go (seed 641)
    ("split_pairs+hybrid_counts_unpaired_closes", {HYBRID_SPLIT_PAIR}, 3000),
    ("retire_unsettled", {CONSISTENT_LOST, CONSISTENT_UNCOMMITTED, HYBRID}, 1000),
    ("no_holes", {CONSISTENT_UNCOMMITTED}, 300),
    ("no_included", {HYBRID}, 300),
    ("follower_drops_undecided", {CONSISTENT_LOST}, 1000),
    # found by this simulation and fixed (README, Findings): the old publish consumer's silent reset
    ("publish_skips_deleted", {CONSISTENT_UNCOMMITTED}, 300),
    # issue 18: in-flight records no longer pin the reconciled position; their attempts are kept pending
    ("forget_pending", {EVENTUAL_FOLD}, 1000),
    # issue 33, hole 1: a reconcile task retried after a partial flush resends its records (seed 15)
    ("readers_count_copies", {EVENTUAL_FOLD}, 300, Hazards(two_reconcilers=False)),
    # issue 33, hole 2: a reconciler stalled past its lease writes what the next one wrote (seed 68)
    (
        "readers_count_copies",
        {EVENTUAL_FOLD},
        300,
        Hazards(reconcile_task_retries=False, always_two_reconcilers=True),
    ),
    # issue 33, hole 3: a stale checkpoint after a newer one's tombstones, then compaction (seed 20)
    ("stale_checkpoint", {LEDGER_LOST}, 300, Hazards(eager_cleaner=True)),
    # found by this simulation (README, Findings): one key for every watermark record (seed 9)
    ("one_watermark_key", {WATERMARK_BACK}, 300, Hazards(eager_cleaner=True)),
    # issue 33, hole 3 (followers): a follower that lagged past compaction (seed 0)
    ("follower_ignores_compaction", {CONSISTENT_LOST}, 300),
    # issue 33, hole 4: a commit whose state is unknown taken as committed (seed 1)
    ("unknown_as_success", {BATCH_MISSING}, 300),
    # issue 37: the feed's copy reads its progress before taking the feed's transactional id (seed 12)
    ("feed_progress_before_token", {FEED_DUPLICATE}, 1000, Hazards(committed_feed=True)),
    # found by this simulation with the feed's steps (seed 359): an eventual hybrid read counted a late
    # copy of a closing half whose pair closed below its start (about 12 s: the first seed is 359)
    ("hybrid_counts_unpaired_closes", {HYBRID_SPLIT_PAIR, HYBRID}, 400, Hazards(committed_feed=True)),
]


def _planted_id(entry: tuple[Any, ...]) -> str:
    return entry[0] if len(entry) == 3 else f"{entry[0]}-{entry[3]}"


@pytest.mark.parametrize("entry", PLANTED, ids=[_planted_id(p) for p in PLANTED])
def test_planted_bug_is_found(entry: tuple[Any, ...], record_property: Any) -> None:
    bug, invariants, within = entry[:3]
    hazards = entry[3] if len(entry) > 3 else None
    bugs = Bugs(**dict.fromkeys(bug.split("+"), True))
    for seed in range(within):
        result = run(seed, bugs, hazards)
        hit = {v.invariant for v in result.violations} & invariants
        if hit:
            record_property("report", f"planted bug {bug}: found at seed {seed}: {sorted(hit)}")
            return
    pytest.fail(f"the simulation did not find planted bug {bug} ({sorted(invariants)}) in {within} seeds")


# -- what the simulation found in the current code ----------------------------------------------------


def test_finding_eventual_hybrid_read_inside_a_reassert_pair() -> None:
    """What the sweep found (25 of 10,000 seeds, e.g. 171), reduced to the real core functions.

    A publish that read the log end between the two halves of a reconciler reassert pair put the
    watermark, and so the next commit's log positions, inside the pair; an eventual hybrid read from
    that snapshot returned the second half alone and counted the row twice (retract semantics). Fixed:
    reassert halves carry ``reassert-half`` and the watermark stops before an unclosed pair.
    """
    from airflow_logstore.core import reconcile
    from airflow_logstore.core.codec import RecordMeta, RowKind, decode_headers, encode_headers, encode_value
    from airflow_logstore.core.summary import CommitInfo
    from airflow_logstore.core.visibility import ReadFilter, WatermarkScan, classify, commit_positions

    from .model import ControlTopic, KafkaLog, row_id
    from .oracle import retract_fold

    log, ctl = KafkaLog(1), ControlTopic()
    zombie, successor = ctl.claim_epoch("a"), ctl.claim_epoch("a")
    row = {"id": 1, "v": "x"}
    for epoch, task in ((zombie, "0.7"), (successor, "0.9")):  # both attempts produce batch 1
        meta = RecordMeta("a", epoch, 1, task)
        log.append(0, b"[1]", encode_value(RowKind.INSERT, row), encode_headers(meta), None)
    ctl.record_commit(CommitInfo("a", 1, successor, 1, 1, offsets={0: (1, 1)}, tasks=frozenset({"0.9"})))
    state, ends = ctl.read(), log.end_offsets()
    scanned = [reconcile.LogRecordIn(0, e.offset, e.key, e.headers, e.value) for e in log.scan({0: 0}, ends)]
    plans, _ = reconcile.plan_partitions(scanned, state, {0: 0}, ends)
    outputs = [out for plan in plans for out in plan.iter_outputs()]  # reversal, reassert -U x, +U x
    assert [out.record_type.value for out in outputs] == ["reversal", "reassert", "reassert"]
    assert [out.pair_half for out in outputs] == [0, 1, 2]
    for out in outputs[:2]:
        log.append(0, out.key, out.value, out.headers(1, 1), None)
    # a publish reads the log end here, between the reassert's halves
    ends, state = log.end_offsets(), ctl.read()
    scan = WatermarkScan(state.watermark)
    for entry in log.scan({0: 0}, ends):
        meta = decode_headers(entry.headers)
        scan.observe(0, entry.offset, classify(meta, 0, entry.offset, state), meta.pair_half)
    watermark = scan.finish(ends)
    log.append(0, outputs[2].key, outputs[2].value, outputs[2].headers(1, 1), None)
    positions = commit_positions({}, watermark)  # the next commit (another writer's) starts here
    assert positions == {0: 3}  # before the pair's opening half, not inside the pair
    read_filter = ReadFilter(ctl.read(), consistent=False, snapshot_sequence=2, start=positions)
    kept = [
        e
        for e in log.scan(positions, log.end_offsets())
        if read_filter.decide(decode_headers(e.headers), 0, e.offset)[0]
    ]
    table = Counter([row_id(row)])
    assert +retract_fold(table, kept) == table  # before the fix: the +U half alone counted the row twice
