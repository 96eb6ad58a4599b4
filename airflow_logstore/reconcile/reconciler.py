"""Failover reconciliation, the I/O: reverse the records that failed writer attempts left in the log.

One run (:func:`reconcile`, what the operator, ``logstore reconcile`` and the PySpark job call):

1. takes the ``reconciler`` lease in the table's control topic (a claim record with owner and ttl;
   the first live claim in log order holds it, expiry judged by the broker's record timestamps, never
   by a host's clock). Losing the race reports "another reconciler holds the lease" and writes nothing
   else (its own claim is released at once). A background thread renews the lease while the run
   lasts; it is released at the end;
2. captures the log's end offsets: the **safe point**. Records after it are left for the next run;
3. reads the control state *after* the safe point (so every scanned record's epoch claim is known)
   and adds the commits of live snapshots to the ledger (``core.ledger.missing_commits``, recorded
   with ``publish.record_commits``);
4. per partition, scans from the last reconciled position (or the log start) to the safe point:
   headers decide, values are decoded only for records to reverse or reassert
   (:mod:`airflow_logstore.core.reconcile`). A position below the log start is a **retention gap**:
   reported, marked with a ``log-gap/<partition>`` control record (the table's log needs a hybrid
   re-read from a snapshot) and skipped, never an out-of-range crash. Undecodable records go to the
   dead-letter topic ``<topic>.logstore-dlq`` and are counted;
5. checks the lease is still ours (else :class:`~airflow_logstore.exceptions.FencedError`), produces
   the reversals and reasserts (idempotent producer, ``acks=all``) to the partitions of their
   originals, and flushes;
6. checks the lease again and only then appends the ``reconcile`` progress record: per partition the
   next offset to scan (the first record still in flight, or the safe point), the run number, lease,
   safe point and output offsets. A crash before this record makes the next run scan the same window
   again; the ``reverses`` headers of the reversals already written keep it from reversing anything
   twice, and the records it did not reach are reversed then: nothing twice, nothing missed.

Each step is one function below, called in this order by ``_run``: :func:`take_lease`,
:func:`safe_point`, :func:`control_state`, :func:`plan_window` (where each partition starts, the
gaps), :func:`scan_and_plan`, :func:`produce` (fence check first), :func:`record_gaps` and
:func:`record_progress` (fence check first). What a run reads of the table is read once
(:class:`TableLog`) and passed to the steps.

``dry_run=True`` computes the same report and writes nothing (no lease, no ledger, no dead letters).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_logstore.core import control
from airflow_logstore.core import reconcile as core
from airflow_logstore.core.ledger import missing_commits, with_commits
from airflow_logstore.core.records import LeaseClaim, LeaseRelease
from airflow_logstore.exceptions import FencedError, OptionError
from airflow_logstore.log import control_topic, jvm_scan, kafka_client
from airflow_logstore.log.deadletter import dead_letter_topic_name
from airflow_logstore.pause import kill_point, kill_points
from airflow_logstore.publish.publisher import record_commits
from airflow_logstore.reconcile import scan as reconcile_scan
from airflow_logstore.table.tables import LogStoreTable, merged_state, snapshot_commits

log = logging.getLogger(__name__)

LEASE_NAME = core.LEASE_NAME
DEFAULT_LEASE_TTL_S = 120.0
#: The clock skew a lease allows between the brokers that stamp the control topic (see ReconcilerLease).
LEASE_SKEW_MARGIN_MS = 2000
STAGES = core.STAGES

StageHook = Callable[[str], None]
Offsets = dict[int, tuple[int, int]]


@dataclass
class ReconcileReport:
    """What one run did, in numbers: printed by the CLI, returned (XCom) by the operator."""

    table: str
    topic: str = ""
    status: str = "reconciled"  # reconciled | dry-run | lease-held
    dry_run: bool = False
    engine: str = "python"
    run: int | None = None
    lease_id: int | None = None
    lease_holder: dict[str, Any] | None = None
    owner: str = ""
    scanned: int = 0
    redundant: int = 0
    redundant_by_attempt: dict[str, int] = field(default_factory=dict)
    redundant_by_writer: dict[str, int] = field(default_factory=dict)
    redundant_by_batch: dict[str, int] = field(default_factory=dict)
    redundant_by_epoch: dict[str, int] = field(default_factory=dict)
    reversed: int = 0
    reasserted: int = 0
    reasserts_completed: int = 0
    reassert_skipped: int = 0
    already_reversed: int = 0
    copies_seen: int = 0  # second copies of reconciler records (a retried task, a second reconciler)
    skipped_in_flight: int = 0
    in_flight: dict[str, Any] = field(default_factory=dict)
    dead_lettered: int = 0
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    dead_letter_topic: str | None = None
    foreign: int = 0
    by_decision: dict[str, int] = field(default_factory=dict)
    safe_point: dict[str, int] = field(default_factory=dict)
    log_start: dict[str, int] = field(default_factory=dict)
    positions_before: dict[str, int] = field(default_factory=dict)
    positions_after: dict[str, int] = field(default_factory=dict)
    #: undecided attempts kept for the next run (per partition: writer, epoch, batch, task, log-only,
    #: first and last offset), and where this run started a partition early for one decided since
    pending: dict[str, list[list[Any]]] = field(default_factory=dict)
    rescanned_from: dict[str, int] = field(default_factory=dict)
    gaps: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    output_offsets: dict[str, list[int]] = field(default_factory=dict)
    ledger_added: list[str] = field(default_factory=list)
    progress_recorded: bool = False
    seconds: float = 0.0
    scan_seconds: float = 0.0
    records_per_second: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def absorb(self, summary: Mapping[str, Any]) -> None:
        for name, value in summary.items():
            if hasattr(self, name):
                setattr(self, name, value)


# --- the lease ------------------------------------------------------------------------------------------


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _now_ms() -> int:
    return int(time.time() * 1000)


class ReconcilerLease:
    """The ``lease/reconciler`` claim of one run: acquire, renew in the background, check, release.

    Who holds the lease is decided by the control topic alone (:class:`~airflow_logstore.core.control.Lease`):
    the first live claim in log order, expiry judged by the records' broker timestamps. No host's wall
    clock decides anything. This run's own view of how long it may still act is measured with its
    monotonic ``clock`` from the moment it *sent* the claim or renewal the log's expiry is based on,
    minus :data:`LEASE_SKEW_MARGIN_MS`, the assumed bound on the skew between the brokers that stamp
    the control topic (a record is stamped after it was sent, so the broker's expiry is later still).

    :param ttl_s: how long a claim or renewal lasts; more than twice the skew margin.
    :param clock: monotonic seconds (injectable for tests)
    """

    def __init__(
        self,
        ctl: control_topic.ControlTopic,
        owner: str,
        ttl_s: float,
        name: str = LEASE_NAME,
        clock: Callable[[], float] = time.monotonic,
    ):
        if ttl_s * 1000 <= 2 * LEASE_SKEW_MARGIN_MS:
            raise OptionError(
                "lease_ttl_s",
                f"must be more than {2 * LEASE_SKEW_MARGIN_MS / 1000:g}s (twice the clock skew the lease "
                f"allows between brokers), got {ttl_s}",
            )
        self.ctl = ctl
        self.owner = owner
        self.ttl_ms = int(ttl_s * 1000)
        self.name = name
        self.clock = clock
        self.lease_id: int | None = None
        self._sent: dict[int, float] = {}  # offset of our claim/renewal -> clock() before sending it
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _append(self, value: LeaseClaim) -> int:
        sent = self.clock()
        offset = self.ctl.append(control.lease_key(self.name), value)
        self._sent[offset] = sent
        return offset

    def acquire(self) -> control.Lease | None:
        """Claim the lease; return None when we hold it, else the live holder (our claim is released)."""
        offset = self._append(LeaseClaim(self.owner, self.ttl_ms, _now_ms()))
        lease_id = offset + 1
        holder = self.ctl.read().live_lease(self.name)
        if holder is None or holder.lease_id != lease_id:
            # step aside at once: a live claim of ours would otherwise hold the lease after the holder's
            self.ctl.append(control.lease_key(self.name), LeaseRelease(lease_id, self.owner))
            return holder or control.Lease(self.name, -1, "unknown (expired meanwhile)", 0)
        self.lease_id = lease_id
        self._thread = threading.Thread(target=self._keep, name=f"lease-{lease_id}", daemon=True)
        self._thread.start()
        return None

    def renew(self) -> None:
        with self._lock:
            self._append(LeaseClaim(self.owner, self.ttl_ms, _now_ms(), renews=self.lease_id))

    def _keep(self) -> None:
        interval = self.ttl_ms / 3000
        while not self._stop.wait(interval):
            try:
                self.renew()
            except Exception as exc:  # the fence check will notice an expired lease
                log.warning("renewing reconciler lease %s failed: %s", self.lease_id, exc)

    def time_left_s(self, holder: control.Lease) -> float:
        """How long this run may still act on ``holder`` (ours), by its own monotonic clock."""
        sent = self._sent.get(holder.basis_offset)
        if sent is None:
            return 0.0
        return sent + (self.ttl_ms - LEASE_SKEW_MARGIN_MS) / 1000 - self.clock()

    def check(self) -> None:
        """Raise :class:`FencedError` unless the log names us the holder and our time is not up."""
        holder = self.ctl.read().live_lease(self.name)
        if holder is None or holder.lease_id != self.lease_id:
            raise FencedError(
                f"reconciler lease {self.lease_id} of {self.owner} is no longer held "
                f"(holder now: {holder.owner + ' lease ' + str(holder.lease_id) if holder else 'none'}); "
                "this run stops without writing"
            )
        left = self.time_left_s(holder)
        if left <= 0:
            raise FencedError(
                f"reconciler lease {self.lease_id} of {self.owner} is no longer held (its time ran out "
                "before a renewal was recorded; another reconciler may take it); this run stops without "
                "writing"
            )
        if left * 1000 < self.ttl_ms / 2:
            self.renew()

    def close(self) -> None:
        """Stop renewing, then release (a renewal after the release could never revive it anyway)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lease_id is not None:
            with self._lock:
                self.ctl.append(control.lease_key(self.name), LeaseRelease(self.lease_id, self.owner))


# --- engines: where the scan and the produce run -----------------------------------------------------------


@dataclass
class ScanJob:
    """Everything an engine needs to scan and plan one run."""

    handle: LogStoreTable
    topic: str
    kafka_config: dict[str, Any]
    starts: dict[int, int]
    ends: dict[int, int]
    state: control.ControlState
    lookback: dict[int, tuple[int, int]]
    dry_run: bool
    dead_letter_topic: str
    replication_factor: int | None = None  # None: the broker's default


@dataclass
class PlanResult:
    stats: list[core.PartitionStats]
    output_count: int
    outputs: Any  # engine-specific: PartitionPlans (python) or a persisted DataFrame (spark)


class Engine(Protocol):
    name: str

    def plan(self, job: ScanJob) -> PlanResult: ...

    def produce(
        self, job: ScanJob, result: PlanResult, lease_id: int, run: int
    ) -> dict[int, tuple[int, int]]: ...


class PythonEngine:
    """Scans in a JVM, or with librdkafka consumers (worker processes for large windows); produces from
    this process.

    :param workers: librdkafka scan processes for large windows (default 1: scan in this process).
    :param scanner: ``jvm`` (:mod:`airflow_logstore.log.jvm_scan`: the records reach Python as columns),
        ``librdkafka``, or ``auto`` (the JVM for windows of at least
        :data:`~airflow_logstore.log.jvm_scan.JVM_MIN_RECORDS` records when a JDK is installed).
    """

    name = "python"

    def __init__(
        self,
        workers: int | None = None,
        parallel_min_records: int = reconcile_scan.PARALLEL_MIN_RECORDS,
        scanner: str = "auto",
    ) -> None:
        jvm_scan.choose_scanner(scanner, 0)  # a bad name fails here, before the lease
        self.workers = workers
        self.parallel_min_records = parallel_min_records
        self.scanner = scanner

    def plan(self, job: ScanJob) -> PlanResult:
        task = reconcile_scan.ScanTask(
            job.topic,
            job.kafka_config,
            job.starts,
            job.ends,
            job.state,
            job.lookback,
            None if job.dry_run else job.dead_letter_topic,
            job.replication_factor,
        )
        plans = reconcile_scan.scan(
            task, workers=self.workers, parallel_min_records=self.parallel_min_records, scanner=self.scanner
        )
        count = sum(plan.output_count for plan in plans)
        return PlanResult([plan.stats for plan in plans], count, plans)

    def produce(self, job: ScanJob, result: PlanResult, lease_id: int, run: int) -> Offsets:
        outputs = (out for plan in result.outputs for out in plan.iter_outputs())
        return produce_outputs(job.kafka_config, job.topic, outputs, result.output_count, lease_id, run)


def produce_outputs(
    kafka_config: Mapping[str, Any],
    topic: str,
    outputs: Iterable[core.Output],
    count: int,
    lease_id: int,
    run: int,
) -> dict[int, tuple[int, int]]:
    """Produce ``count`` reversals and reasserts in order, each to its original's partition; flush.

    The producer's queue is bounded: records are built and handed over as the broker acknowledges.
    """
    if not count:
        return {}
    tracker = kafka_client.DeliveryTracker()
    prod = kafka_client.producer(kafka_config, **{"linger.ms": 20, "queue.buffering.max.messages": 20000})
    records = ((out.key, out.value, out.partition, out.headers(lease_id, run)) for out in outputs)
    kafka_client.produce_each(prod, topic, records, tracker)
    kafka_client.flush(prod, tracker, count, f"writing reversals to '{topic}'")
    return dict(tracker.offsets)


# --- one run ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableLog:
    """What a run reads of the table once, at its start: the table, its settings, its log and control
    topic, and the Kafka client settings. Every step takes these values; none asks the handle again."""

    handle: LogStoreTable
    table: Any  # the pyiceberg table as loaded at the start
    config: Any  # its LogStoreConfig
    topic: str
    ctl: control_topic.ControlTopic
    kafka_config: dict[str, Any]

    @classmethod
    def open(cls, handle: LogStoreTable) -> TableLog:
        table = handle.load()
        side = handle.log_side(table)
        return cls(handle, table, side.config, side.topic, side.control, side.kafka_config)


@dataclass(frozen=True)
class Window:
    """What one run scans, per partition: from ``starts`` up to the safe point, and what it found
    before scanning (retention gaps, warnings); ``lookback`` as in :func:`core.lookback_ranges`."""

    run: int
    bounds: dict[int, tuple[int, int]]  # (log start, end offset) when the run started
    starts: dict[int, int]
    gaps: list[core.Gap]
    warnings: list[str]
    lookback: dict[int, tuple[int, int]]
    carried: dict[int, list[list[Any]]] = field(default_factory=dict)  # pending attempts not rescanned

    @property
    def safe_point(self) -> dict[int, int]:
        return {p: high for p, (_, high) in self.bounds.items()}


def reconcile(
    handle: LogStoreTable,
    *,
    dry_run: bool = False,
    owner: str | None = None,
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
    engine: Engine | None = None,
    stage_hook: StageHook | None = None,
) -> ReconcileReport:
    """Reconcile the table's log once (see the module docstring); return the report."""
    started = time.monotonic()
    engine = engine or PythonEngine()
    kill_points()  # a test's LOGSTORE_KILL_AT that names no kill point fails before the lease is taken
    hook = _at_stage(stage_hook)
    log_side = TableLog.open(handle)
    owner = owner or default_owner()
    report = ReconcileReport(
        str(handle.name),
        log_side.topic,
        status="dry-run" if dry_run else "reconciled",
        dry_run=dry_run,
        engine=engine.name,
        owner=owner,
    )
    lease: ReconcilerLease | None = None
    if not dry_run:
        taken = take_lease(log_side.ctl, owner, lease_ttl_s)
        if isinstance(taken, control.Lease):
            report.absorb(lease_held(str(handle.name), taken))
            report.seconds = round(time.monotonic() - started, 3)
            return report
        lease = taken
        report.lease_id = lease.lease_id
    try:
        hook("lease-acquired")
        report.absorb(_run(log_side, engine, lease, hook))
    finally:
        if lease is not None:
            lease.close()
    report.seconds = round(time.monotonic() - started, 3)
    _log_report(report)
    return report


def _at_stage(stage_hook: StageHook | None) -> StageHook:
    """What a run does at each of its :data:`STAGES`: the kill point ``reconcile:<stage>`` (tests'
    ``LOGSTORE_KILL_AT``), then the caller's hook (tests that stop a run at a stage in-process)."""

    def at(stage: str) -> None:
        kill_point(f"reconcile:{stage}")
        if stage_hook is not None:
            stage_hook(stage)

    return at


def _run(
    log_side: TableLog, engine: Engine, lease: ReconcilerLease | None, hook: StageHook
) -> dict[str, Any]:
    """The run after the lease (None: a dry run), as the protocol orders it; returns report fields."""
    bounds = safe_point(log_side)
    state, ledger_added = control_state(log_side, record_ledger=lease is not None)
    window = plan_window(state, bounds)
    _warn(log_side.handle, window.warnings)
    job = scan_job(log_side, window, state, dry_run=lease is None)
    result, scan_seconds = scan_and_plan(engine, job)
    gaps = [*window.gaps, *core.scan_gaps(result.stats)]
    _warn_gaps(log_side.handle, gaps)
    summary = core.summarize(result.stats)
    pending = core.pending_attempts(window.carried, result.stats)
    fields = {
        **summary,
        **window_fields(window, state, result.stats, gaps),
        "pending": pending,
        "ledger_added": ledger_added,
        "scan_seconds": scan_seconds,
        "records_per_second": round(summary["scanned"] / scan_seconds) if scan_seconds else 0.0,
        "dead_letter_topic": job.dead_letter_topic if summary["dead_lettered"] else None,
    }
    hook("planned")
    if lease is None:
        return fields
    output = produce(engine, job, result, lease, window.run, hook)
    record_gaps(log_side.ctl, gaps, window.run, lease)
    positions = next_positions(result.stats)
    recorded = progress_changed(state, positions, output, gaps, pending)
    if recorded:
        record_progress(log_side.ctl, lease, window, positions, output, pending, summary, hook)
    return {**fields, "output_offsets": _span_keys(output), "progress_recorded": recorded}


# --- the steps of a run -------------------------------------------------------------------------------


def take_lease(ctl: control_topic.ControlTopic, owner: str, ttl_s: float) -> ReconcilerLease | control.Lease:
    """Step 1: our lease, held and renewed from now on; or, when another reconciler holds it, the
    live holder (our claim is released at once)."""
    lease = ReconcilerLease(ctl, owner, ttl_s)
    holder = lease.acquire()
    return lease if holder is None else holder


def lease_held(table: str, holder: control.Lease) -> dict[str, Any]:
    """The report fields of a run that found the lease held by another reconciler."""
    log.warning(
        "reconcile %s: another reconciler holds the lease (%s, lease %s, expires at %s ms); nothing done",
        table,
        holder.owner,
        holder.lease_id,
        holder.expires_at_ms,
    )
    return {
        "status": "lease-held",
        "lease_holder": {
            "owner": holder.owner,
            "lease_id": holder.lease_id,
            "expires_at_ms": holder.expires_at_ms,
        },
    }


def safe_point(log_side: TableLog) -> dict[int, tuple[int, int]]:
    """Per partition (log start, end offset) now: the ends are the run's safe point (step 2)."""
    cons = kafka_client.consumer(log_side.kafka_config)
    try:
        return kafka_client.partition_offsets(cons, log_side.topic, log_side.config.partitions)
    finally:
        cons.close()


def control_state(log_side: TableLog, *, record_ledger: bool) -> tuple[control.ControlState, list[str]]:
    """The control state, read *after* the safe point (every record before it was produced after its
    epoch's claim), with the commits of live snapshots added; recorded in the ledger unless a dry run
    (step 3). Returns the state and the commits added to the ledger."""
    state = log_side.ctl.read()
    if not record_ledger:
        return merged_state(log_side.table, state), []
    added = missing_commits(state, snapshot_commits(log_side.table))
    return with_commits(state, added), record_commits(log_side.ctl, added)


def plan_window(state: control.ControlState, bounds: Mapping[int, tuple[int, int]]) -> Window:
    """Where each partition's scan starts, the retention gaps and the lookback ranges (step 4)."""
    progress = state.reconcile_progress
    starts, gaps, warnings, carried = core.window_starts(state, bounds)
    lookback = core.lookback_ranges(progress, starts)
    return Window(core.run_number(progress), dict(bounds), starts, gaps, warnings, lookback, carried)


def scan_job(log_side: TableLog, window: Window, state: control.ControlState, *, dry_run: bool) -> ScanJob:
    """What the engine scans and plans: every partition from its start to the safe point."""
    return ScanJob(
        log_side.handle,
        log_side.topic,
        log_side.kafka_config,
        window.starts,
        window.safe_point,
        state,
        window.lookback,
        dry_run,
        dead_letter_topic_name(log_side.topic),
        log_side.config.replication_factor,
    )


def scan_and_plan(engine: Engine, job: ScanJob) -> tuple[PlanResult, float]:
    """Step 4: scan every partition's window and plan what to write; returns the plan and the
    scan's seconds."""
    started = time.monotonic()
    result = engine.plan(job)
    return result, round(time.monotonic() - started, 3)


def progress_changed(
    state: control.ControlState,
    positions: Mapping[int, int],
    output: Offsets,
    gaps: Sequence[core.Gap],
    pending: Mapping[str, Any] | None = None,
) -> bool:
    """Whether the run has anything to record: output written, gaps found, positions moved or the
    pending attempts changed."""
    before = (state.reconcile_progress or {}).get("pending") or {}
    return bool(
        output
        or gaps
        or positions != {p: state.reconcile_positions.get(p) for p in positions}
        or (pending or {}) != before
    )


def next_positions(stats: Iterable[core.PartitionStats]) -> dict[int, int]:
    """Per partition the next offset to scan: the safe point (records in flight are kept as pending
    attempts, :func:`core.window_starts`)."""
    return {s.partition: s.next_position for s in stats}


def window_fields(
    window: Window,
    state: control.ControlState,
    stats: Iterable[core.PartitionStats],
    gaps: Iterable[core.Gap],
) -> dict[str, Any]:
    """The report fields that say where the run scanned and where the next one starts."""
    return {
        "run": window.run,
        "safe_point": _str_keys(window.safe_point),
        "log_start": _str_keys({p: low for p, (low, _) in window.bounds.items()}),
        "positions_before": _str_keys({p: int(state.reconcile_positions.get(p, 0)) for p in window.bounds}),
        "positions_after": _str_keys(next_positions(stats)),
        "rescanned_from": _str_keys(
            {
                p: start
                for p, start in window.starts.items()
                if start < state.reconcile_positions.get(p, start)
            }
        ),
        "gaps": [gap.to_dict() for gap in gaps],
        "warnings": list(window.warnings),
    }


def produce(
    engine: Engine, job: ScanJob, result: PlanResult, lease: ReconcilerLease, run: int, hook: StageHook
) -> Offsets:
    """Check the lease, then write the planned reversals and reasserts and flush (step 5); returns
    per partition the offsets written."""
    if not result.output_count:
        return {}
    lease.check()
    hook("lease-checked")  # a run that stalls here past its lease writes late: copies (output_identity)
    assert lease.lease_id is not None
    output = engine.produce(job, result, lease.lease_id, run)
    hook("output-flushed")
    return output


def record_gaps(
    ctl: control_topic.ControlTopic, gaps: Iterable[core.Gap], run: int, lease: ReconcilerLease
) -> None:
    """A ``log-gap/<partition>`` control record per retention gap: the log needs a hybrid re-read."""
    for gap in gaps:
        ctl.append(
            control.gap_key(gap.partition),
            core.gap_value(gap, run=run, lease_id=lease.lease_id or 0, now_ms=_now_ms()),
        )


def record_progress(
    ctl: control_topic.ControlTopic,
    lease: ReconcilerLease,
    window: Window,
    positions: Mapping[int, int],
    output: Offsets,
    pending: Mapping[str, list[list[Any]]],
    summary: Mapping[str, Any],
    hook: StageHook,
) -> None:
    """Check the lease again, then append the ``reconcile`` progress record (step 6)."""
    lease.check()
    hook("before-progress")
    ctl.append(
        control.K_RECONCILE,
        core.progress_value(
            positions=positions,
            safe_point=window.safe_point,
            output=output,
            pending=pending,
            lease_id=lease.lease_id or 0,
            run=window.run,
            owner=lease.owner,
            summary=summary,
            now_ms=_now_ms(),
        ),
    )


def _warn(handle: LogStoreTable, warnings: Iterable[str]) -> None:
    for warning in warnings:
        log.warning("reconcile %s: %s", handle.name, warning)


def _warn_gaps(handle: LogStoreTable, gaps: Iterable[core.Gap]) -> None:
    for gap in gaps:
        log.warning(
            "reconcile %s: partition %s records [%s, %s) (%s records) were deleted by retention before "
            "reconciliation scanned them; the log needs a hybrid re-read from a snapshot",
            handle.name,
            gap.partition,
            gap.from_offset,
            gap.to_offset,
            gap.count,
        )


def _span_keys(spans: Offsets) -> dict[str, list[int]]:
    return {str(p): list(span) for p, span in sorted(spans.items())}


def _str_keys(values: Mapping[int, int]) -> dict[str, int]:
    return {str(p): int(o) for p, o in sorted(values.items())}


def _log_report(report: ReconcileReport) -> None:
    log.info(
        "reconcile %s (%s, run %s, lease %s): scanned %s records in %.1fs (%s/s); redundant %s %s; "
        "reversed %s, reasserted %s, already reversed %s, skipped in flight %s, dead-lettered %s, gaps %s; "
        "positions %s -> %s (safe point %s)",
        report.table,
        report.status,
        report.run,
        report.lease_id,
        report.scanned,
        report.scan_seconds,
        report.records_per_second,
        report.redundant,
        report.redundant_by_attempt,
        report.reversed,
        report.reasserted,
        report.already_reversed,
        report.skipped_in_flight,
        report.dead_lettered,
        len(report.gaps),
        report.positions_before,
        report.positions_after,
        report.safe_point,
    )


__all__ = ["DEFAULT_LEASE_TTL_S", "LEASE_NAME", "ReconcileReport", "ReconcilerLease", "reconcile"]
