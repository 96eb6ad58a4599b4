"""The LogStore view on real services: a table on the real broker and catalog with a known in-flight batch,
a dead-pending one, a known reversal count and a retention gap; Airflow's real API server (its simple
auth manager with a login required) serving the plugin; the page in a real headless Chromium.

The table is built without Spark, the way test_checkpoints builds its batches: epoch claims, records
with LogStore headers and ledger entries through the real control topic, and each commit an Iceberg
snapshot with its LogStore summary (pyiceberg). Publishing and reconciliation are the real ones.

Only Airflow's API server runs (no scheduler, dag-processor or triggerer: the view needs none of them).
It is not the end-to-end tests' Airflow: that one runs without a login (``simple_auth_manager_all_admins``),
and ``--dist loadfile`` puts the two files on different workers, so sharing it would still start one per
worker. Cost on this machine: about 40 s for the API server (``db migrate`` included), a few seconds for
the table and the browser. The screenshots go to ``.cache/artifacts/test_ui_view/`` in the checkout.
"""

from __future__ import annotations

import json
import secrets
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from airflow_logstore.core.codec import RecordMeta, encode_headers
from airflow_logstore.core.summary import CommitInfo
from airflow_logstore.health import LiveProbe, table_health
from airflow_logstore.log import kafka_client
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.reconcile.reconciler import reconcile
from airflow_logstore.table.catalog import CatalogSpec
from airflow_logstore.table.tables import LogStoreTable, create_table
from logstore_dev.services.airflow_local import LocalAirflow
from logstore_dev.testing.environment import REPO_ROOT, LogStoreTestEnv, free_port_pair
from tests.integration.chromium import headless_chromium

pytestmark = pytest.mark.airflow_e2e

ARTIFACTS = REPO_ROOT / ".cache" / "artifacts" / "test_ui_view"
SCHEMA = "id int, name string, amount long"


# -- a table with known numbers --------------------------------------------------------------------------


@dataclass
class KnownTable:
    handle: LogStoreTable
    epochs: dict[str, int]
    commits: list[str]
    reversed: int


def write_attempt(
    handle: LogStoreTable, writer: str, batch: int, partition: int, count: int, epoch: int | None = None
) -> tuple[int, tuple[int, int], str]:
    """An attempt's records of ``batch`` in ``partition`` (claiming an epoch unless given): (epoch, its
    first and last offset, its task attempt tag)."""
    config = handle.config()
    epoch = epoch or handle.control(config).claim_epoch(writer)
    task = f"{partition}.{epoch}"
    headers = encode_headers(RecordMeta(writer, epoch, batch, task))
    tracker = kafka_client.DeliveryTracker()
    prod = kafka_client.producer(handle.kafka_config(config))
    for n in range(count):
        key = batch * 100 + n
        value = {"kind": "+I", "row": {"id": key, "name": writer, "amount": n}}
        prod.produce(
            config.topic or "",
            key=json.dumps([key]).encode(),
            value=json.dumps(value).encode(),
            headers=headers,
            partition=partition,
            on_delivery=tracker,
        )
    kafka_client.flush(prod, tracker, count, f"attempt {writer}/{batch}/{epoch}")
    return epoch, tracker.offsets[partition], task


def commit(
    handle: LogStoreTable,
    writer: str,
    batch: int,
    epoch: int,
    partition: int,
    span: tuple[int, int],
    task: str,
) -> str:
    """Commit the attempt as the writer does: an Iceberg snapshot with its summary, then its ledger entry."""
    import pyarrow as pa

    count = span[1] - span[0] + 1
    entry = CommitInfo(
        writer, batch, epoch, offsets={partition: span}, tasks=frozenset({task}), record_count=count
    )
    table = handle.load()
    rows = [{"id": batch * 100 + n, "name": writer, "amount": n} for n in range(count)]
    table.append(
        pa.Table.from_pylist(rows, schema=table.schema().as_arrow()), snapshot_properties=entry.to_summary()
    )
    snapshot = handle.load().current_snapshot()
    assert snapshot is not None
    entry = replace(
        entry,
        snapshot_id=snapshot.snapshot_id,
        sequence_number=snapshot.sequence_number,
        timestamp_ms=snapshot.timestamp_ms,
    )
    handle.control().record_commit(entry.to_json(), writer, batch)
    return f"{writer}/{batch}/{epoch}"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> CatalogSpec:
    """A catalog of the view's own: the page lists exactly the table below."""
    folder = tmp_path_factory.mktemp("view-catalog")
    return CatalogSpec(
        uri=f"sqlite:///{folder / 'catalog.db'}?timeout=30", warehouse=(folder / "warehouse").as_uri()
    )


@pytest.fixture(scope="module")
def known(env: LogStoreTestEnv, catalog: CatalogSpec) -> KnownTable:
    name = env.unique("viewed")
    handle = LogStoreTable.open(f"ops.{name}", catalog)
    create_table(handle, SCHEMA, primary_key=["id"], properties=env.log_properties(f"{name}_log"))
    # batch 1, committed and published; then retention deletes its records before any reconcile run
    e1, span, task = write_attempt(handle, "w", 1, 0, 5)
    commits = [commit(handle, "w", 1, e1, 0, span, task)]
    publish_visible_offsets(handle)
    config = handle.config()
    from confluent_kafka import TopicPartition

    cut = TopicPartition(config.topic, 0, span[1] + 1)
    admin = kafka_client.admin_client(handle.kafka_config(config))
    admin.delete_records([cut])[cut].result(timeout=30)
    # batch 2: an attempt dies after writing its 4 records; the next attempt commits it
    e2, _, _ = write_attempt(handle, "w", 2, 0, 4)
    e3, span, task = write_attempt(handle, "w", 2, 0, 4)
    commits.append(commit(handle, "w", 2, e3, 0, span, task))
    # in flight: a stream's batch 7 in partition 1; dead pending: a retry's first attempt of batch 5
    stream, _, _ = write_attempt(handle, "stream", 7, 1, 3)
    r1, _, _ = write_attempt(handle, "retry", 5, 2, 2)
    r2 = handle.control().claim_epoch("retry")  # its next attempt has claimed, not written yet
    report = reconcile(handle)
    assert (report.reversed, [g["partition"] for g in report.gaps]) == (4, [0]), report.to_dict()
    publish_visible_offsets(handle)
    epochs = {"w1": e1, "w2": e2, "w3": e3, "stream": stream, "r1": r1, "r2": r2}
    return KnownTable(handle, epochs, commits, report.reversed)


def test_a_lag_window_with_more_control_records_than_a_load_reads_is_sampled_across_it(
    known: KnownTable,
) -> None:
    """The live probe on the real control topic: with a limit below what the window holds, it reads
    evenly spaced slices from the window's start to its end (the newest record included), in order."""
    from airflow_logstore.health.probe import history_ranges

    probe = LiveProbe(known.handle)
    config = known.handle.config()
    everything, sampled = probe.control_history(config, 0, 10_000)
    assert not sampled and len(everything) >= 12
    first, end = everything[0].offset, everything[-1].offset + 1
    records, sampled = probe.control_history(config, 0, 4)
    assert sampled
    offsets = [r.offset for r in records]
    assert offsets == sorted(offsets) and len(offsets) <= 4
    want = [o for a, b in history_ranges(first, end, 4) for o in range(a, b)]
    assert offsets == [o for o in want if o in {r.offset for r in everything}]
    assert offsets[0] < first + (end - first) // 4 and offsets[-1] == end - 1  # the oldest part, the newest


def test_the_health_of_a_real_table(known: KnownTable) -> None:
    """The data module on the real broker and catalog: every number the page shows, from metadata."""
    health = table_health(LiveProbe(known.handle))
    assert health["errors"] == {}
    batches = health["batches"]
    assert [(a["writer_id"], a["batch_id"], a["epoch"], a["records"]) for a in batches["in_flight"]] == [
        ("stream", 7, known.epochs["stream"], 3)
    ]
    assert [(a["writer_id"], a["batch_id"], a["epoch"], a["records"]) for a in batches["dead_pending"]] == [
        ("retry", 5, known.epochs["r1"], 2)
    ]
    assert batches["scanned"] == 5 and not batches["truncated"]  # only the records above the watermark
    log = {p["partition"]: p for p in health["log"]["partitions"]}
    assert [(p["behind_records"], p["watermark"]) for p in log.values()] == [
        (0, log[0]["log_end"] - 1),
        (3, -1),
        (2, -1),
    ]
    assert 0 < log[1]["behind_s"] < 600 and health["log"]["behind_records"] == 5
    run = health["reconcile"]["last_run"]
    assert (run["reversed"], run["redundant"], run["dead_lettered"], run["run"]) == (4, 4, 0, 1)
    assert sorted((p["writer_id"], p["batch_id"]) for p in health["reconcile"]["pending_attempts"]) == [
        ("retry", 5),
        ("stream", 7),
    ]
    (gap,) = health["retention"]["recorded"]
    assert (gap["partition"], gap["from"], gap["to"], gap["count"]) == (0, 0, 5, 5)
    assert health["retention"]["upcoming"] == [] and health["retention"]["needs_hybrid_reread"]
    current = health["snapshot"]["current"]
    assert current["commit"] == known.commits[-1] and 0 <= current["age_s"] < 600
    compaction = health["compaction"]
    assert (compaction["small_files"], compaction["delete_files"], compaction["due"]) == (2, 0, False)
    assert compaction["last_run"] is None
    lag = health["lag"]
    assert [p["commit"] for p in lag["points"]] == known.commits and all(
        p["lag_s"] >= 0 for p in lag["points"]
    )


# -- Airflow's API server with a login -------------------------------------------------------------------


@dataclass
class ApiServer:
    url: str
    passwords: dict[str, str]

    def token(self, user: str) -> str:
        body = json.dumps({"username": user, "password": self.passwords[user]}).encode()
        request = urllib.request.Request(
            f"{self.url}/auth/token", data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return str(json.load(response)["access_token"])

    def get(self, path: str, token: str | None = None) -> tuple[int, str, str]:
        """(status, content type, body) of ``GET path`` (with ``token`` as a bearer token)."""
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        request = urllib.request.Request(f"{self.url}{path}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, response.headers.get("content-type", ""), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("content-type", ""), exc.read().decode()


@pytest.fixture(scope="module")
def api_server(
    env: LogStoreTestEnv, catalog: CatalogSpec, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """Airflow's API server alone, its simple auth manager requiring a login: ``viewer`` (role viewer)
    and ``nobody`` (no role: a real user without the view's permission). The ``logstore_default``
    connection names the view's catalog, as a deployment's would."""
    home = tmp_path_factory.mktemp("airflow-ui")
    passwords = {"viewer": secrets.token_urlsafe(12), "nobody": secrets.token_urlsafe(12)}
    (home / "passwords.json").write_text(json.dumps(passwords))
    connection = {
        "conn_type": "logstore",
        "host": catalog.uri,
        "extra": {"type": "sql", "warehouse": catalog.warehouse, "catalog_name": catalog.name},
    }
    airflow = LocalAirflow(
        env.settings,
        home / "dags",
        port=free_port_pair(),
        home=home,
        extra_env={
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "viewer:viewer,nobody:",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW_CONN_LOGSTORE_DEFAULT": json.dumps(connection),
        },
    )
    (home / "dags").mkdir()
    airflow.pid_dir.mkdir()
    airflow.airflow("db", "migrate")
    process = airflow.component("api-server")
    server = ApiServer(airflow.url, passwords)

    def healthy() -> bool:
        try:
            status, _, body = server.get("/api/v2/monitor/health")
        except OSError:
            return False
        return status == 200 and json.loads(body)["metadatabase"]["status"] == "healthy"

    try:
        process.up(
            lambda: process.launch(
                [sys.executable, "-m", "airflow", "api-server"], env=airflow.env(), cwd=home
            ),
            healthy,
            timeout=180,
            where=airflow.url,
        )
        yield server
    finally:
        process.stop()


def test_airflow_mounts_the_view_and_links_it_from_its_menu(api_server: ApiServer) -> None:
    status, _, body = api_server.get("/api/v2/plugins", api_server.token("viewer"))
    assert status == 200, body
    (plugin,) = [p for p in json.loads(body)["plugins"] if p["name"] == "logstore"]
    assert [app["url_prefix"] for app in plugin["fastapi_apps"]] == ["/logstore"]
    (view,) = plugin["external_views"]
    assert (view["href"], view["url_route"], view["category"]) == ("/logstore/", "logstore", "browse")


def test_the_json_api_refuses_anonymous_requests_and_answers_a_logged_in_user(
    api_server: ApiServer, known: KnownTable
) -> None:
    one = f"/logstore/api/tables/{known.handle.name}"
    for path in ("/logstore/api/tables", one, "/logstore/"):
        assert api_server.get(path)[0] == 401, path
        assert api_server.get(path, "not-a-token")[0] == 403, path
        assert api_server.get(path, api_server.token("nobody"))[0] == 403, path
    status, kind, page = api_server.get("/logstore/")
    assert kind.startswith("text/html") and "Log in" in page and "/auth/login" in page
    status, kind, body = api_server.get(one, api_server.token("viewer"))
    assert status == 200 and kind.startswith("application/json"), body
    table = json.loads(body)
    assert table["errors"] == {}
    assert [(a["writer_id"], a["batch_id"]) for a in table["batches"]["in_flight"]] == [("stream", 7)]
    assert table["reconcile"]["last_run"]["reversed"] == known.reversed
    status, _, body = api_server.get("/logstore/api/tables", api_server.token("viewer"))
    assert status == 200 and [t["table"] for t in json.loads(body)["tables"]] == [str(known.handle.name)]


#: What the test reads of the rendered page (after its script ran): the table's row and details.
READ_ROW = """(() => {
  const row = document.querySelector(`tr[data-table="${NAME}"]`);
  const text = (selector) => [...row.querySelectorAll(selector)].map(n => n.textContent);
  const details = document.querySelector(`section[data-table="${NAME}"]`);
  return {
    in_flight: text('td[data-field="undecided"] [data-state="in-flight"]'),
    dead_pending: text('td[data-field="undecided"] [data-state="dead-pending"]'),
    reversed: text('td[data-field="reconcile"] [data-field="reversed"]'),
    behind: row.querySelector('td[data-field="behind"]').textContent,
    gaps: row.querySelector('td[data-field="gaps"]').textContent,
    compaction: row.querySelector('td[data-field="compaction"]').textContent,
    chart_points: Number(row.querySelector('svg.lag-chart').dataset.points),
    batch_rows: [...details.querySelectorAll('table.batches tbody tr')].map(
      tr => [...tr.children].slice(0, 5).map(td => td.textContent)),
    partitions: details.querySelectorAll('table.partitions tbody tr').length,
  };
})()"""


def test_the_page_renders_the_table_in_chromium_inside_the_airflow_ui(
    api_server: ApiServer, known: KnownTable, tmp_path: Path
) -> None:
    name = str(known.handle.name)
    read_row = READ_ROW.replace("${NAME}", name)
    stream, r1 = known.epochs["stream"], known.epochs["r1"]
    with headless_chromium(tmp_path / "profile") as browser:
        # without a session the page says how to log in
        browser.open(f"{api_server.url}/logstore/")
        assert browser.wait_for("document.getElementById('auth-error')?.dataset.status") == "401"

        browser.set_cookie(api_server.url, "_token", api_server.token("viewer"))  # as the UI's login sets it
        browser.open(f"{api_server.url}/logstore/")
        browser.wait_for("document.body.dataset.state === 'ready'")
        shown = browser.evaluate(read_row)
        page_shot = browser.screenshot(ARTIFACTS / "logstore-view.png")

        # the same page inside Airflow's own UI (the menu entry's route): an iframe of the plugin's page
        browser.open(f"{api_server.url}/plugin/logstore")
        frame = "document.querySelector('iframe[src*=\"/logstore/\"]')?.contentDocument"
        browser.wait_for(f"{frame}?.body?.dataset.state === 'ready'", timeout=120)
        in_airflow = browser.evaluate(read_row.replace("document.querySelector", f"{frame}.querySelector"))
        ui_shot = browser.screenshot(ARTIFACTS / "logstore-view-in-airflow.png")

    assert shown["in_flight"] == [f"stream batch 7 epoch {stream} (3 records)"]
    assert shown["dead_pending"] == [f"retry batch 5 epoch {r1} (2 records)"]
    assert shown["reversed"] == [f"{known.reversed} reversed"] == ["4 reversed"]
    assert shown["behind"].startswith("5 records")
    assert shown["gaps"] == "1 gap(s): hybrid re-read"
    assert (
        shown["compaction"].startswith("2 small, 0 delete files") and "no commit yet" in shown["compaction"]
    )
    assert shown["chart_points"] == 2
    assert shown["batch_rows"] == [
        ["in-flight", "stream", "7", str(stream), "3"],
        ["dead-pending", "retry", "5", str(r1), "2"],
    ]
    assert shown["partitions"] == 3
    # inside Airflow's UI the same, read a few seconds later (only the ages moved on)
    assert in_airflow.pop("behind").startswith("5 records") and shown.pop("behind")
    assert in_airflow == shown
    assert page_shot.stat().st_size > 10_000 and ui_shot.stat().st_size > 10_000
    print(f"screenshots: {page_shot} {ui_shot}")
