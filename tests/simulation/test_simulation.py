"""The protocol under 10,000 seeded interleavings, and proof that the checker can fail.

Replay one seed (its trace is printed): ``LOGSTORE_SIM_SEED=123 pytest tests/simulation -k replay -s``;
with a planted bug: ``LOGSTORE_SIM_BUGS=decide_once``.
"""

from __future__ import annotations

import os
import time
from dataclasses import fields
from typing import Any

import pytest

from .actors import Bugs
from .oracle import (
    BATCH_TWICE,
    CONSISTENT_DUPLICATE,
    CONSISTENT_LOST,
    CONSISTENT_UNCOMMITTED,
    FENCED_COMMIT,
    HYBRID,
    HYBRID_SPLIT_PAIR,
)
from .sim import Result, run

SEEDS = 10_000
CHUNK = 500


def _known_finding(result: Result) -> bool:
    """The one violation of the current code the simulation found (see README.md, "Findings")."""
    return all(v.invariant == HYBRID_SPLIT_PAIR for v in result.violations)


@pytest.mark.parametrize(
    "first", range(0, SEEDS, CHUNK), ids=lambda first: f"seeds{first}-{first + CHUNK - 1}"
)
def test_seeds(first: int, record_property: Any) -> None:
    started = time.monotonic()
    failures: list[Result] = []
    known: list[int] = []
    for seed in range(first, first + CHUNK):
        result = run(seed)
        if result.ok:
            continue
        if _known_finding(result):
            known.append(seed)
        else:
            failures.append(result)
    if known:
        record_property("report", f"known finding ({HYBRID_SPLIT_PAIR}) at seeds {known}")
    assert not failures, f"{len(failures)} seed(s) failed; the first:\n" + "\n\n".join(
        r.explain() for r in failures[:2]
    )
    assert time.monotonic() - started < 60, "a chunk of seeds took over a minute"


def _bugs_from_env() -> Bugs:
    names = [n.strip() for n in os.environ.get("LOGSTORE_SIM_BUGS", "").split(",") if n.strip()]
    known = {f.name for f in fields(Bugs)}
    unknown = set(names) - known
    assert not unknown, f"unknown LOGSTORE_SIM_BUGS {sorted(unknown)}; known: {sorted(known)}"
    return Bugs(**dict.fromkeys(names, True))


def test_replay() -> None:
    """Replays ``LOGSTORE_SIM_SEED`` (with ``LOGSTORE_SIM_BUGS``) and prints its whole trace."""
    seed = os.environ.get("LOGSTORE_SIM_SEED")
    if seed is None:
        pytest.skip("set LOGSTORE_SIM_SEED=<seed> to replay one run")
    result = run(int(seed), _bugs_from_env())
    print(result.explain(last=len(result.trace)))
    assert result.ok, result.explain()


def test_runs_are_deterministic() -> None:
    for seed in (1, 2, 3):
        first, second = run(seed), run(seed)
        assert first.trace == second.trace and first.violations == second.violations


# Each planted bug (a test-only switch restoring the old behaviour of a hole of issue 13) must be found
# within `within` seeds, as one of the named invariants.
PLANTED = [
    ("decide_once", {BATCH_TWICE, FENCED_COMMIT}, 300),
    ("attempt_number_tags", {CONSISTENT_UNCOMMITTED, CONSISTENT_DUPLICATE}, 300),
    ("state_before_ends", {CONSISTENT_LOST}, 1500),
    ("advance_positions", {HYBRID}, 300),
]


@pytest.mark.parametrize(("bug", "invariants", "within"), PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_bug_is_found(bug: str, invariants: set[str], within: int, record_property: Any) -> None:
    bugs = Bugs(**{bug: True})
    for seed in range(within):
        result = run(seed, bugs)
        hit = {v.invariant for v in result.violations} & invariants
        if hit:
            record_property("report", f"planted bug {bug}: found at seed {seed}: {sorted(hit)}")
            return
    pytest.fail(f"the simulation did not find planted bug {bug} ({sorted(invariants)}) in {within} seeds")
