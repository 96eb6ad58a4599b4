"""One seeded run: set up a world, interleave the actors' steps, quiesce, let the oracle judge.

``run(seed)`` is deterministic: the same seed (and ``Bugs``) gives the same interleaving, crashes and
result. Replay one with ``LOGSTORE_SIM_SEED=<seed> pytest tests/simulation -k replay``.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from . import actors
from .actors import Bugs, Observed, Steps, World
from .model import Catalog, ControlTopic, KafkaLog, Row
from .oracle import Violation, check

MAX_STEPS = 3000


@dataclass
class Actor:
    name: str
    start: Callable[[], Steps]
    crashable: bool
    runs: int = 1  # services run several times (a crash ends the current run)
    background: bool = False  # followers: run until the others are done
    period: int = 0  # a periodic service (retention): after a run it waits up to this many steps
    at_step: int = 0  # when it starts (and, after a pause, when it resumes)
    steps: Steps | None = None
    pending: str = "start"  # the step it takes at its next turn (the label its generator last yielded)

    def step(self, world: World) -> bool:
        """Take one step (noted in the trace as it happens); False once the run has ended."""
        if self.steps is None:
            self.steps = self.start()
        world.control.now += 1  # time passes: the broker stamps control records with this clock
        world.note(f"{self.name}: {self.pending}")
        try:
            self.pending = next(self.steps)
        except StopIteration:
            self.steps, self.pending = None, "start"
            return False
        return True


@dataclass(frozen=True)
class Hazards:
    """Which of issue 33's actors and faults a run may have (each drawn per seed when allowed); a
    planted bug's test narrows them to the hazard it is about."""

    reconcile_task_retries: bool = True
    two_reconcilers: bool = True
    compaction: bool = True
    unknown_commits: bool = True
    #: every run compacts its control topic, with a cleaner that runs at nearly every step and a lag of
    #: a few steps (a day of compaction lag squeezed into the race windows), and 2-3 publishers that
    #: overlap and checkpoint often
    eager_cleaner: bool = False
    #: two reconcilers in every run (else in 30 % of the runs that allow them)
    always_two_reconcilers: bool = False
    #: the table has a committed feed: every publish also copies (issue 37). Off in the main sweep, so
    #: its 10,000 interleavings stay those of the protocol without the feed's extra steps
    committed_feed: bool = False


@dataclass
class Result:
    seed: int
    bugs: Bugs
    violations: list[Violation]
    hazards: Hazards = field(default_factory=lambda: Hazards())
    trace: list[str] = field(default_factory=list)
    steps: int = 0
    events: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.violations

    def explain(self, last: int = 80) -> str:
        lines = [f"seed {self.seed} ({self.bugs}): {len(self.violations)} violation(s)"]
        lines += [f"  - {v}" for v in self.violations]
        lines.append(f"trace (last {last} of {len(self.trace)} steps):")
        lines += [f"    {line}" for line in self.trace[-last:]]
        planted = ",".join(name for name, on in vars(self.bugs).items() if on)
        narrowed = ",".join(f"{k}={v}" for k, v in vars(self.hazards).items() if v != getattr(Hazards(), k))
        env = f"LOGSTORE_SIM_SEED={self.seed}" + (f" LOGSTORE_SIM_BUGS={planted}" if planted else "")
        env += f" LOGSTORE_SIM_HAZARDS={narrowed}" if narrowed else ""
        lines.append(f"replay: {env} .venv/bin/pytest tests/simulation -k replay -s -p no:cacheprovider")
        return "\n".join(lines)


def make_inputs(
    rng: random.Random, writers: list[str], batches: int, keyed: bool
) -> dict[str, list[list[Row]]]:
    inputs: dict[str, list[list[Row]]] = {}
    for index, writer in enumerate(writers):
        keys = [10 * (index + 1) + k for k in range(3)]  # each writer owns its keys
        inputs[writer] = []
        for batch in range(1, batches + 1):
            if keyed:
                chosen = rng.sample(keys, rng.randint(1, 2))
                rows = [
                    {"id": key, "v": f"{writer}{batch}", "op": "D" if rng.random() < 0.25 else "U"}
                    for key in chosen
                ]
            else:
                rows = [
                    {"id": f"{writer}{batch}.{j}", "v": writer, "op": "I"} for j in range(rng.randint(1, 2))
                ]
            inputs[writer].append(rows)
    return inputs


def run(seed: int, bugs: Bugs | None = None, hazards: Hazards | None = None) -> Result:
    rng = random.Random(seed)
    bugs = bugs or Bugs()
    hazards = hazards or Hazards()
    writers = ["a", "b"] if rng.random() < 0.8 else ["a"]
    keyed = rng.random() < 0.6
    # the control topic's cleaner (compaction) in half the runs, with a small min.compaction.lag; a run
    # with compaction reads the whole topic only while no checkpoint exists, as the real readers do
    compacted = hazards.compaction and (hazards.eager_cleaner or rng.random() < 0.5)
    lag = (rng.randint(1, 4) if hazards.eager_cleaner else rng.randint(1, 30)) if compacted else None
    world = World(
        rng=rng,
        bugs=bugs,
        partitions=2,
        keyed=keyed,
        inputs=make_inputs(rng, writers, rng.randint(2, 3), keyed),
        log=KafkaLog(2),
        # some reads fold the whole topic instead of the latest checkpoint + its tail
        control=ControlTopic(
            full_fold_rate=0.0 if compacted else rng.choice([0.0, 0.1, 0.3]),
            rng=rng,
            lag=lag,
            delete_retention=rng.randint(0, 30),
        ),
        catalog=Catalog(),
        committed_feed=hazards.committed_feed,
        checkpoint_every=rng.randint(1, 10) if hazards.eager_cleaner else rng.randint(3, 10),
        reconcilers=2
        if hazards.always_two_reconcilers or (hazards.two_reconcilers and rng.random() < 0.3)
        else 1,
        reconcile_task_retries=hazards.reconcile_task_retries and rng.random() < 0.5,
        unknown_commits=rng.choice([0.0, 0.1, 0.3]) if hazards.unknown_commits else 0.0,
    )
    cast: list[Actor] = []
    for writer in writers:
        for attempt in range(rng.randint(1, 3)):  # later attempts are failovers: the earlier ones zombies
            cast.append(
                Actor(
                    f"writer {writer}#{attempt + 1}",
                    partial(actors.writer_attempt, world, writer),
                    crashable=True,
                    at_step=0 if attempt == 0 else rng.randint(1, 80),
                )
            )
    publishers = rng.choice([2, 3] if hazards.eager_cleaner else [1, 1, 2, 3])
    for publisher in range(publishers):  # publishes of several DAG runs may overlap
        cast.append(
            Actor(
                f"publisher#{publisher + 1}",
                partial(actors.publisher, world),
                True,
                runs=rng.randint(4, 8) if hazards.eager_cleaner else rng.randint(2, 6),
            )
        )
    if rng.random() < 0.7 or world.reconcilers > 1:
        for number in range(1, world.reconcilers + 1):  # two may run at once: the lease decides
            name = "reconciler" if world.reconcilers == 1 else f"reconciler#{number}"
            cast.append(
                Actor(
                    name,
                    partial(actors.reconciler, world, name),
                    True,
                    runs=rng.randint(1, 3),
                    at_step=rng.randint(0, 60) if number > 1 else 0,
                )
            )
    if lag is not None:
        cast.append(
            Actor(
                "cleaner",
                partial(actors.cleaner, world),
                False,
                runs=10**6,
                background=True,
                period=1 if hazards.eager_cleaner else rng.randint(1, 8),
            )
        )
    if rng.random() < 0.5:
        cast.append(
            Actor(
                "compaction",
                lambda: actors.compaction(world),
                True,
                runs=rng.randint(1, 2),
                at_step=rng.randint(0, 60),
            )
        )
    follower = Observed("consistent follower", consistent=True, final=True)
    eventual = Observed("eventual follower", consistent=False, final=True)
    incremental = Observed("incremental consistent reader", consistent=True, final=True)
    world.observed += [follower, eventual, incremental]
    if rng.random() < 0.5:  # a consistent follower started later: from the latest checkpoint
        late = Observed("late consistent follower", consistent=True, final=True)
        world.observed.append(late)
        cast.append(
            Actor(
                "late consistent follower",
                lambda: actors.consistent_follower(world, late),
                False,
                background=True,
                at_step=rng.randint(20, 200),
            )
        )
    cast.append(
        Actor(
            "consistent follower", lambda: actors.consistent_follower(world, follower), False, background=True
        )
    )
    cast.append(
        Actor("eventual follower", lambda: actors.eventual_follower(world, eventual), False, background=True)
    )
    cast.append(
        Actor(
            "incremental reader",
            lambda: actors.incremental_reader(world, incremental, 10**9),
            False,
            background=True,
        )
    )
    for _ in range(rng.randint(0, 2)):
        cast.append(
            Actor(
                "hybrid reader", lambda: actors.hybrid_reader(world, True), False, at_step=rng.randint(0, 120)
            )
        )
    if rng.random() < 0.5:
        cast.append(
            Actor(
                "batch reader", lambda: actors.batch_reader(world, True), False, at_step=rng.randint(0, 120)
            )
        )

    if rng.random() < 0.5:  # the log topic's retention deletes old segments now and then
        cast.append(
            Actor("retention", partial(actors.retention, world), False, runs=rng.randint(2, 8), period=50)
        )

    # in some runs the followers and readers poll about twice as often (a tight tailing loop)
    steps = _interleave(world, cast, rng, busy_share=rng.choice([0.75, 0.5]))

    # quiescence: every writer's last attempt succeeds (an Airflow retry), then publish, reconcile, publish
    for writer in writers:
        _finish(
            world,
            Actor(
                f"writer {writer} recovery",
                partial(actors.writer_attempt, world, writer, crashes=False),
                False,
            ),
        )
    # a crashed or abandoned reconciler's lease expires first: time passes
    world.control.now += actors.LEASE_TTL + 1
    for name, start in (
        ("publisher", actors.publisher),
        ("reconciler", partial(actors.reconciler, name="final reconciler")),
        ("publisher", actors.publisher),
    ):
        _finish(world, Actor(f"final {name}", partial(start, world), False))
    for actor in cast:  # the followers drain what is now visible
        if actor.background:
            actor.steps = actor.steps or actor.start()
            for _ in range(4):
                actor.step(world)
    final_reads = [
        actors.batch_reader(world, True, final=True),
        actors.batch_reader(world, False, final=True),
    ]
    view = world.catalog.load()
    for snapshot in view.ancestors():
        final_reads.append(actors.hybrid_reader(world, True, snapshot.snapshot_id, final=True))
        final_reads.append(actors.hybrid_reader(world, False, snapshot.snapshot_id, final=True))
    for steps_of in final_reads:
        for _ in steps_of:
            pass
    state = world.control.read(full=False)
    known = {(c.writer_id, c.batch_id) for c in world.landed if state.committed(c.writer_id, c.batch_id)}
    world.events.update(world.control.reads)
    violations = check(world, state.watermark, known)
    return Result(seed, bugs, violations, hazards, world.trace, steps, world.events)


def _interleave(world: World, cast: list[Actor], rng: random.Random, busy_share: float = 0.75) -> int:
    """Run the actors' steps in a seeded random order until every non-background actor is done."""
    step = 0
    while step < MAX_STEPS and any(a.runs > 0 and not a.background for a in cast):
        step += 1
        live = [a for a in cast if a.runs > 0 and a.at_step <= step]
        busy = [a for a in live if not a.background]
        if not busy:
            continue  # everyone with work to do is paused or not started yet: time passes
        actor = rng.choice(busy if rng.random() < busy_share else live)
        if rng.random() < 0.06:  # a slow actor (GC pause, long Spark stage): it stops here for a while
            actor.at_step = step + rng.randint(5, 40)
            world.note(f"{actor.name}: paused before '{actor.pending}' until step {actor.at_step}", "pause")
            continue
        if actor.crashable and actor.steps is not None and rng.random() < 0.03:
            actor.steps.close()
            world.note(
                f"{actor.name}: CRASH before '{actor.pending}'",
                f"crash {actor.name.split()[0].split('#')[0]}",
            )
            _ended(actor)
            continue
        if not actor.step(world):
            _ended(actor)
            if actor.period:
                actor.at_step = step + rng.randint(1, actor.period)
    return step


def _ended(actor: Actor) -> None:
    actor.steps, actor.pending = None, "start"
    actor.runs -= 1
    if actor.name.startswith("writer"):
        actor.runs = 0


def _finish(world: World, actor: Actor) -> None:
    while actor.step(world):
        pass
