"""LogStoreReadVisibleOperator: read exactly what the visible events of its DAG run made visible."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from airflow.sdk import BaseOperator

from airflow_logstore.operators._base import LogStoreOperator
from airflow_logstore.operators._lineage import Lineage, LineageMixin, location_dataset

#: how many of the asset's events stored before a run's own ones it looks at (the furthest offsets any
#: reached; see :mod:`airflow_logstore.core.windows`)
LOOKBACK_EVENTS = 16


class LogStoreReadVisibleOperator(LineageMixin, LogStoreOperator):
    """In a DAG scheduled on ``table``'s visible asset
    (:func:`~airflow_logstore.triggers.assets.logstore_visible_asset`), read with the consistency
    guarantee exactly the log records that the run's events made visible: never a record of an
    uncommitted batch, never a change an earlier run of the DAG read, none left out.

    The window comes from the events (:func:`~airflow_logstore.core.windows.run_window`): per partition
    from the furthest offset the asset's earlier events reached to the furthest its own events reached.
    A cleared run reads its window again. A run that no visible event of ``table`` triggered (a manual
    run, an event of another table) is skipped. Retention that deleted records of the window before the
    run read them fails the task (``OptionError`` naming the partition and offsets), never a silent gap.

    XCom: ``table``, ``window`` (``from``/``to`` per partition), ``events``, ``commits`` (that the events
    named), ``records`` (changes read) and the read ``report``.

    :param table: ``namespace.table`` (not templated: the task's inlet is the table's visible asset)
    :param output_path: when set, the changes are written there as JSON lines (templated)
    :param changelog_mode: ``all-kinds`` or ``append-only``; default: the table's setting
    :param scanner: how the log is read (see :class:`~airflow_logstore.operators.read.LogStoreReadOperator`)
    :param lookback_events: how many earlier events of the asset to look at (enough unless a triggerer
        overlap stored more events out of order than that)
    """

    template_fields: Sequence[str] = ("output_path",)
    ui_color = "#dfe7fd"

    def __init__(
        self,
        *,
        table: str,
        output_path: str | None = None,
        changelog_mode: str | None = None,
        scanner: str = "auto",
        lookback_events: int = LOOKBACK_EVENTS,
        **kwargs: Any,
    ) -> None:
        from airflow.sdk import Asset

        from airflow_logstore.triggers.assets import visible_asset_name

        # a reference, not the asset: an asset declared here without its watcher would replace the one
        # the DAG is scheduled on (Airflow keeps one definition per asset, the last one it collects)
        self.asset = Asset.ref(name=visible_asset_name(table))
        kwargs["inlets"] = [*(kwargs.get("inlets") or []), self.asset]
        super().__init__(**kwargs)
        self.table = table
        self.output_path = output_path
        self.changelog_mode = changelog_mode
        self.scanner = scanner
        self.lookback_events = lookback_events

    def own_events(self, context: Any) -> list[tuple[datetime, dict[str, Any]]]:
        """(stored time, payload) of the visible events of ``table`` that triggered this run."""
        from airflow_logstore.core.windows import is_visible_payload, payload_of

        triggering = context.get("triggering_asset_events") or {}
        found = []
        for event in triggering.get(self.asset) or []:
            payload = payload_of(event.extra)
            if is_visible_payload(payload, self.table):
                assert payload is not None
                found.append((event.timestamp, dict(payload)))
        return found

    def earlier_payloads(self, context: Any, first: datetime, same_time: int) -> list[dict[str, Any]]:
        """The payloads of the asset's events stored before ``first`` (the newest ones first): every
        event stored at ``first`` itself is one of the run's own (``same_time`` of them), as Airflow
        gives a run every event of a time slice."""
        from airflow_logstore.core.windows import payload_of

        accessor = context["inlet_events"][self.asset]
        events = accessor.before(first.isoformat()).ascending(False).limit(self.lookback_events + same_time)
        payloads = []
        for event in events:
            payload = payload_of(event.extra)
            if event.timestamp < first and payload is not None:
                payloads.append(dict(payload))
        return payloads

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        from airflow_logstore.core.windows import commits_of, run_window
        from airflow_logstore.operators._failures import fail_fast

        own = self.own_events(context)
        if not own:
            raise AirflowSkipException(
                f"no visible event of {self.table} triggered this run: nothing became visible to read"
            )
        first = min(when for when, _ in own)
        same_time = sum(1 for when, _ in own if when == first)
        payloads = [payload for _, payload in sorted(own, key=lambda found: found[0])]  # oldest first
        earlier = self.earlier_payloads(context, first, same_time)
        window = run_window(payloads, earlier)
        summary: dict[str, Any] = {
            "table": self.table,
            "window": window.to_json(),
            "events": len(own),
            "commits": commits_of(payloads),
        }
        self.log.info(
            "%s: %s visible events (%s earlier ones looked at); reading offsets %s",
            self.table,
            len(own),
            len(earlier),
            window.to_json(),
        )
        if window.empty:
            self.log.info("%s: an earlier run read every offset these events made visible", self.table)
            return {**summary, "records": 0, "report": None}
        with fail_fast():  # a missing table or records retention deleted fail without retries
            result = self._read(window)
        self.lineage_result = {**summary, "records": result["records"], "report": result["report"]}
        return self.lineage_result

    def lineage(self, result: Mapping[str, Any] | None) -> Lineage:
        """OpenLineage: the log topic in; the output file out, when there is one."""
        output = location_dataset(self.output_path) if self.output_path else None
        return Lineage.of([self.table_lineage(self.table).log()], [output])

    def _read(self, window: Any) -> dict[str, Any]:
        from airflow_logstore.read.reader import StartPosition, run_read

        return run_read(
            self.logstore_table(self.table),
            mode="log",
            consistency="consistent",
            changelog_mode=self.changelog_mode,
            start=StartPosition.at(window.start),
            end=window.end,
            output_path=self.output_path,
            scanner=self.scanner,
        )


class LogStoreVisibleCatchUpOperator(BaseOperator):
    """Brings a later run for ``table``'s visible events that Airflow left behind.

    Airflow (up to at least 3.3.2, apache/airflow#56050) gives an asset-triggered run only the events
    stored up to when its DAG was queued for it. Events that came after that, while the DAG could not
    start a run (``max_active_runs``), get a run only when another event of the asset comes: on a table
    that goes quiet, its last changes would wait for its next visible change. This task, at the end of a
    run of a DAG scheduled on the table's visible asset, looks for visible events stored after the run's
    own ones (after ``run_after``); when there are some, it emits one event on the asset, whose run takes
    them (its window, :func:`~airflow_logstore.core.windows.run_window`, ends where they end; this event's
    own range is empty). With none, it is skipped and emits nothing, so a quiet table gets no extra run.
    An event it emits while a run is already queued joins that run; otherwise its run may read nothing
    (another run took the events meanwhile). Catch-up events are not counted (they bring no further
    catch-up): runs of several DAGs on the asset, or of one with ``max_active_runs`` > 1, never bring
    each other's runs forever.

    :param table: ``namespace.table`` (the asset is named by reference, as
        :class:`LogStoreReadVisibleOperator` does)
    :param lookback_events: how many of the asset's later events to look at (their furthest offsets)
    """

    ui_color = "#dfe7fd"

    def __init__(self, *, table: str, lookback_events: int = LOOKBACK_EVENTS, **kwargs: Any) -> None:
        from airflow.sdk import Asset

        from airflow_logstore.triggers.assets import visible_asset_name

        self.asset = Asset.ref(name=visible_asset_name(table))
        kwargs["inlets"] = [*(kwargs.get("inlets") or []), self.asset]
        kwargs["outlets"] = [*(kwargs.get("outlets") or []), self.asset]
        super().__init__(**kwargs)
        self.table = table
        self.lookback_events = lookback_events

    def later_payloads(self, context: Any, after: datetime) -> list[dict[str, Any]]:
        """The visible payloads of ``table`` stored after ``after`` (newest first; of the newest
        ``lookback_events`` events), but catch-ups'."""
        from airflow_logstore.core.windows import is_visible_payload, payload_of

        accessor = context["inlet_events"][self.asset]
        events = accessor.after(after.isoformat()).ascending(False).limit(self.lookback_events)
        found = []
        for event in events:
            payload = payload_of(event.extra)
            # a catch-up's own event brings no run it needs another for: counting it, runs of several
            # DAGs on the asset (or of one with max_active_runs > 1) would bring each other forever
            if event.timestamp > after and is_visible_payload(payload, self.table):
                assert payload is not None
                if not payload.get("catch_up"):
                    found.append(dict(payload))
        return found

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        from airflow_logstore.core.windows import catch_up_payload

        run_after = context["dag_run"].run_after
        later = self.later_payloads(context, run_after)
        if not later:
            raise AirflowSkipException(
                f"no visible event of {self.table} came after this run's (run_after {run_after.isoformat()})"
            )
        payload = catch_up_payload(self.table, later)
        context["outlet_events"][self.asset].extra = payload
        self.log.info(
            "%s: %s visible events stored after this run's (up to offsets %s): an event on the asset "
            "brings the run that reads them",
            self.table,
            len(later),
            payload["to"],
        )
        return {"table": self.table, "later_events": len(later), "to": payload["to"]}
