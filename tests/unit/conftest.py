"""What every unit test shares."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_driver_archive(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Spark drivers' class archive that ``./dev test`` builds in the machine's jars cache is left
    out of the Spark settings unit tests compare (a test of the archive brings its own jars cache)."""
    from airflow_logstore.spark import driver_archive

    monkeypatch.setattr(driver_archive, "driver_archive", lambda settings=None: None)
