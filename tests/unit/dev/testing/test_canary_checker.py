"""The canary checker finds a planted canary in each kind of place, and says what it searched."""

from __future__ import annotations

import gzip
import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from logstore_dev.testing.secrets import Places, ProcessWatch, find_canaries, search_processes

CANARY = "Canary-unit-5a1f2e"
OTHER = "Canary-absent-0000"


def _kinds(report) -> set[tuple[str, str]]:
    return {(f.canary, f.kind) for f in report.findings}


def test_texts_in_their_plain_json_and_url_forms() -> None:
    report = find_canaries(
        [CANARY, 'pa ss&w"rd'],
        Places(
            texts={
                "plain": f"line with {CANARY} in it",
                "json": '{"k": "pa ss&w\\"rd"}',
                "url": "http://x/?p=pa%20ss%26w%22rd",
                "clean": "nothing here",
            }
        ),
    )
    assert {(f.canary, f.where) for f in report.findings} == {
        (CANARY, "plain"),
        ('pa ss&w"rd', "json"),
        ('pa ss&w"rd', "url"),
    }
    assert "in it" in report.findings[0].snippet
    assert len(report.checked) == 4


def test_files_and_folders_compressed_or_not(tmp_path: Path) -> None:
    zstandard = pytest.importorskip("zstandard")
    events = tmp_path / "events" / "eventlog_v2_local-1"
    events.mkdir(parents=True)
    (events / "events_1_local-1.zstd").write_bytes(
        zstandard.ZstdCompressor().compress(f'{{"v":"{CANARY}"}}'.encode())
    )
    (events / "events_2_local-1.gz").write_bytes(gzip.compress(b"clean"))
    (events / "events_3_local-1.lz4").write_bytes(b"\x04\x22\x4d\x18")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "attempt=1.log").write_text(f"INFO password is {CANARY}\n")
    report = find_canaries(
        [CANARY, OTHER],
        Places(dirs={"event-log": [tmp_path / "events"], "task-log": [logs, tmp_path / "nope"]}),
    )
    assert _kinds(report) == {(CANARY, "event-log"), (CANARY, "task-log")}
    assert any(path.endswith(".lz4") and "codec" in why for _kind, path, why in report.unchecked)
    assert any(path.endswith("nope") for _kind, path, _why in report.unchecked)
    with pytest.raises(AssertionError, match="FOUND"):
        report.assert_clean()


@pytest.fixture
def spark_like_ui(tmp_path: Path) -> Iterator[str]:
    pages = {
        "/api/v1/applications": '[{"id": "app-1"}]',
        "/environment/": f"<td>spark.sql.catalog.logstore.credential</td><td>{CANARY}</td>",
        "/api/v1/applications/app-1/environment": f'{{"sparkProperties": [["k", "{CANARY}"]]}}',
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write((body or "").encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_spark_ui_page_and_rest_api(spark_like_ui: str) -> None:
    report = find_canaries([CANARY], Places(spark_ui=[spark_like_ui]))
    assert _kinds(report) == {(CANARY, "spark-ui"), (CANARY, "spark-rest")}
    assert any("/api/v1/applications/app-1/environment" in f.where for f in report.findings)
    # resources the fake UI does not serve are reported, not silently skipped
    assert any("jobs" in where for _kind, where, _why in report.unchecked)
    unreachable = find_canaries([CANARY], Places(spark_ui=["http://127.0.0.1:9"], timeout_s=2))
    assert not unreachable.findings and unreachable.unchecked
    with pytest.raises(AssertionError, match="never searched: spark-rest"):
        unreachable.assert_clean(require=("spark-rest",))


def test_process_arguments_and_environments() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import time, sys; time.sleep(60)", f"--password={CANARY}"],
        env={**os.environ, "SOME_TOKEN": OTHER},
    )
    try:
        time.sleep(0.3)
        report = search_processes([CANARY, OTHER], cmdlines=True, environments=True)
        mine = [f for f in report.findings if f.where.startswith(f"pid {child.pid} ")]
        assert {(f.canary, f.kind) for f in mine} == {(CANARY, "cmdline"), (OTHER, "environ")}
        only_child = search_processes(
            [CANARY], cmdlines=True, process_filter=lambda process: process.pid == child.pid
        )
        assert only_child.checked == [("cmdline", "1 processes")]
    finally:
        child.kill()
        child.wait()


def test_a_watch_catches_a_process_that_came_and_went() -> None:
    with ProcessWatch([CANARY], interval_s=0.05) as watch:
        subprocess.run([sys.executable, "-c", "import time; time.sleep(1)", CANARY], check=True)
    assert watch.samples >= 2
    assert (CANARY, "cmdline") in _kinds(watch.report)


def test_an_empty_canary_is_refused() -> None:
    with pytest.raises(ValueError, match="empty canary"):
        find_canaries([""], Places())
