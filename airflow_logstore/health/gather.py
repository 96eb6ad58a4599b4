"""One page load's reads of a table, in the protocol's order, into the sections of :mod:`.view`.

The log side is read as publishing reads it: the log's end offsets, *then* the control state, *then*
the table's live snapshots (so every record below those ends belongs to an epoch the state knows, and
a commit that reached ``main`` but not yet the ledger counts as committed, not in flight). A failing
read costs only its own sections: the table's metadata shows when Kafka is down, and the other tables
show when one table fails; each failure is named in ``errors``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from airflow_logstore.core.ledger import with_commits
from airflow_logstore.exceptions import classify, first_line
from airflow_logstore.health.probe import TableProbe
from airflow_logstore.health.view import (
    DEFAULT_HOURS,
    HISTORY_LIMIT,
    MAX_HOURS,
    TAIL_LIMIT,
    batches_section,
    compaction_section,
    lag_section,
    log_section,
    reconcile_section,
    retention_section,
    snapshot_section,
    tail_range,
)

log = logging.getLogger(__name__)


def describe_error(exc: BaseException) -> str:
    """``<LogStore error class>: <first line of the message>``, as the CLI and operators name errors."""
    return f"{classify(exc)[0]}: {first_line(exc)}"


def table_health(
    probe: TableProbe,
    *,
    now_ms: int | None = None,
    hours: float = DEFAULT_HOURS,
    tail_limit: int = TAIL_LIMIT,
    history_limit: int = HISTORY_LIMIT,
) -> dict[str, Any]:
    """Everything the view shows of one table, as JSON (see :mod:`airflow_logstore.health.view`).

    :param hours: the window of the visibility-lag chart (at most :data:`MAX_HOURS`).
    :param tail_limit: the records above the watermark read per partition.
    :param history_limit: the control records read for the chart.
    """
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    hours = min(max(hours, 0.0), MAX_HOURS)
    health: dict[str, Any] = {"table": probe.name, "generated_at_ms": now_ms, "errors": {}}
    try:
        facts = probe.facts()
    except Exception as exc:
        return _failed(health, "table", exc)
    _read_well(health, "table")
    config = facts.config
    health.update(
        {
            "location": facts.location,
            "log_enabled": config.enabled,
            "topic": config.topic,
            "control_topic": config.control_topic,
            "partitions": config.partitions,
            "consistency": config.consistency.value,
            "snapshot": snapshot_section(facts, now_ms),
        }
    )
    try:
        health["compaction"] = compaction_section(facts, probe.file_stats(facts), config.compaction, now_ms)
        _read_well(health, "compaction")
    except Exception as exc:
        _failed(health, "compaction", exc)
    if not config.enabled:
        return health
    try:
        bounds = probe.log_bounds(config)
        state = probe.control_state(config)
        commits = probe.facts().commits()  # after the state: a commit not yet in the ledger is still one
        start, end = tail_range(state.watermark, bounds, tail_limit)
        tail = probe.tail(config, start, end)
        health["log"] = log_section(state, bounds, tail, now_ms)
        health["batches"] = batches_section(tail, with_commits(state, commits), start, end, bounds)
        health["reconcile"] = reconcile_section(state, bounds, now_ms)
        health["retention"] = retention_section(state, bounds, config)
        since = now_ms - int(hours * 3600 * 1000)
        history, truncated = probe.control_history(config, since, history_limit)
        health["lag"] = lag_section(history, state, commits, now_ms=now_ms, hours=hours, truncated=truncated)
        health["cost"] = {
            "tail_records": len(tail),
            "control_records_after_checkpoint": state.end_offset - state.checkpoint_start,
            "history_records": len(history),
        }
        _read_well(health, "log")
    except Exception as exc:
        _failed(health, "log", exc)
    return health


#: Per (table, part), the error the view last logged with its stack trace (forgotten when the part reads
#: well again), at most ``_LOGGED_MAX`` of them.
_LOGGED: dict[tuple[str, str], str] = {}
_LOGGED_MAX = 256


def _failed(health: dict[str, Any], part: str, exc: BaseException) -> dict[str, Any]:
    """Name the error in the part; log it with its stack trace the first time, then at debug while it
    lasts (the page asks again every minute, and a broker that is down stays down for many of them)."""
    described = health["errors"][part] = describe_error(exc)
    key = (str(health["table"]), part)
    if _LOGGED.get(key) == described:
        log.debug("LogStore view: %s of %s could not be read (again): %s", part, health["table"], described)
        return health
    if len(_LOGGED) >= _LOGGED_MAX:
        _LOGGED.clear()
    _LOGGED[key] = described
    log.warning("LogStore view: %s of %s could not be read: %s", part, health["table"], exc, exc_info=True)
    return health


def _read_well(health: dict[str, Any], *parts: str) -> None:
    """These parts read well: an error of theirs that comes back is logged in full again."""
    for part in parts:
        _LOGGED.pop((str(health["table"]), part), None)


def catalog_health(probes: Iterable[TableProbe], *, workers: int = 4, **options: Any) -> dict[str, Any]:
    """:func:`table_health` of every table, with one clock for all, in the order given.

    Tables are read ``workers`` at a time: a page waits for its slowest table (a broker that does not
    answer costs its Kafka timeout), not for the sum of them.
    """
    from concurrent.futures import ThreadPoolExecutor

    now_ms = int(options.pop("now_ms", None) or time.time() * 1000)
    found = list(probes)
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(found) or 1))) as pool:
        tables = list(pool.map(lambda probe: table_health(probe, now_ms=now_ms, **options), found))
    return {"generated_at_ms": now_ms, "tables": tables}
