"""``python -m tests.prefetch``: a fetch that fails is named and left to its stage; the others still run."""

from __future__ import annotations

import pytest

from tests import prefetch


def test_a_failed_fetch_is_named_and_the_next_ones_still_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []

    def no_maven() -> object:
        raise RuntimeError("Maven ('mvn') is needed once to download the Kafka and Iceberg jars")

    steps = [("jars", no_maven), ("loader", lambda: ran.append("loader"))]
    monkeypatch.setattr(prefetch, "_steps", lambda: steps)

    assert prefetch.main() == 1
    assert ran == ["loader"]
    err = capsys.readouterr().err
    assert "[prefetch] jars: failed (Maven ('mvn') is needed once" in err
    assert "[prefetch] loader: ready in" in err


def test_the_steps_are_listed_without_fetching_anything() -> None:
    steps = prefetch._steps()  # building the list downloads and builds nothing: each step is a call
    assert [what.split(" (")[0] for what, _ in steps] == [
        "Compose's loader",
        "Kafka broker jars",
        "Spark jars",
        "Spark drivers' class archive",
        "object store jars",
        "REST catalog",
    ]
    assert all(callable(step) for _, step in steps)
