"""Shared pytest settings: integration tests are marked by folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.integration)


# Numbers a test reports (seeds, kill counts): `record_property("report", text)`, printed at the end of
# the run, also from xdist workers (user properties travel with the test reports).
_REPORTED: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _REPORTED.extend(
            f"{report.nodeid}: {value}" for name, value in report.user_properties if name == "report"
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _REPORTED:
        terminalreporter.section("reported by tests")
        for line in _REPORTED:
            terminalreporter.write_line(line)
