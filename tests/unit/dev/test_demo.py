"""The demo builds the Spark drivers' class archive beside Airflow's start, once per machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.settings import local_settings
from airflow_logstore.spark import driver_archive
from logstore_dev import demo


class _Archive:
    def __init__(self, staging: Path | None) -> None:
        self.path, self.staging = Path("/cache/spark-driver-x.jsa"), staging


@pytest.mark.parametrize(("built", "result", "printed"), [
    (False, Path("/cache/spark-driver-x.jsa"), "the Spark drivers' class archive: built in"),
    (False, None, "not built (its log: /cache/spark-driver-x.log)"),
    (True, None, None),
])  # fmt: skip
def test_the_demo_builds_the_drivers_archive_once(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    built: bool,
    result: Path | None,
    printed: str | None,
) -> None:
    calls: list[Any] = []
    archive = _Archive(None if built else Path("/cache/staging.jsa"))

    def build(settings: Any = None) -> Path | None:
        calls.append(settings)
        return result

    monkeypatch.setattr(driver_archive, "driver_archive", lambda settings=None: archive)
    monkeypatch.setattr(driver_archive, "build_driver_archive", build)
    thread = demo._archive_builder(local_settings())
    if thread is not None:
        thread.join(timeout=10)
        assert not thread.is_alive()
    out = capsys.readouterr().out
    assert (thread is None) == (printed is None)
    if printed is None:
        assert calls == [] and out == ""  # built already: nothing to do, nothing said
    else:
        assert len(calls) == 1 and printed in out and "beside Airflow's start" in out
